// KvCacheWrite and PagedAttention against a float64 causal attention over contiguous K/V,
// written from the definition (softmax(scale * q·k) v over positions <= the query's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "elementwise_test_util.h"  // IsaLevels
#include "vt/cpu/attention_kernels.h"  // BlocksReadInPlace, ForIsa
#include "vt/vt.h"

namespace vt {
namespace {

struct Seq {
  int64_t ctx, n_new;         // context after the step, rows in this step
  std::vector<int32_t> blocks;  // block table row
};

// Runs a batch: writes every sequence's whole context into a paged cache (through
// KvCacheWrite, slot by slot from its block table), then attends the last n_new positions.
// Returns max |got - ref|.
double RunCase(const Queue& q, DType dtype, int64_t Hq, int64_t Hk, int64_t D, int64_t block_size,
               std::vector<Seq> seqs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t S = static_cast<int64_t>(seqs.size());
  int64_t max_blocks = 0, total_blocks = 0;
  for (const Seq& s : seqs) max_blocks = std::max<int64_t>(max_blocks, (s.ctx + block_size - 1) / block_size);
  // Hand out block ids in a shuffled order so no sequence gets contiguous blocks.
  for (const Seq& s : seqs) total_blocks += (s.ctx + block_size - 1) / block_size;
  const int64_t num_blocks = total_blocks + 3;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (Seq& s : seqs) {
    s.blocks.clear();
    for (int64_t b = 0; b < (s.ctx + block_size - 1) / block_size; ++b) s.blocks.push_back(ids[next++]);
  }
  auto round = [&](float v) { return dtype == DType::kBF16 ? Bf16ToFloat(FloatToBf16(v)) : v; };
  auto encode = [&](const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * DTypeSize(dtype));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype == DType::kBF16) {
        const uint16_t h = FloatToBf16(v[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      } else {
        std::memcpy(&bytes[i * 4], &v[i], 4);
      }
    }
    return bytes;
  };
  Tensor kc = Tensor::Empty({num_blocks, block_size, Hk, D}, dtype);
  Tensor vc = Tensor::Empty({num_blocks, block_size, Hk, D}, dtype);
  std::vector<std::vector<float>> K(S), V(S), Qs(S);
  std::vector<float> query_all;
  std::vector<int32_t> qsl = {0}, lens, tables(S * max_blocks, 0);
  for (int64_t s = 0; s < S; ++s) {
    const Seq& sq = seqs[s];
    K[s].resize(sq.ctx * Hk * D);
    V[s].resize(sq.ctx * Hk * D);
    for (float& x : K[s]) x = round(nd(rng));
    for (float& x : V[s]) x = round(nd(rng));
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < sq.ctx; ++p) slots.push_back(sq.blocks[p / block_size] * block_size + p % block_size);
    KvCacheWrite(q, Tensor::FromHost(encode(K[s]).data(), {sq.ctx, Hk * D}, dtype),
                 Tensor::FromHost(encode(V[s]).data(), {sq.ctx, Hk * D}, dtype), kc, vc,
                 Tensor::FromHost(slots.data(), {sq.ctx}, DType::kI64));
    Qs[s].resize(sq.n_new * Hq * D);
    for (float& x : Qs[s]) x = round(nd(rng));
    query_all.insert(query_all.end(), Qs[s].begin(), Qs[s].end());
    qsl.push_back(qsl.back() + static_cast<int32_t>(sq.n_new));
    lens.push_back(static_cast<int32_t>(sq.ctx));
    std::copy(sq.blocks.begin(), sq.blocks.end(), tables.begin() + s * max_blocks);
  }
  const int64_t T = qsl.back();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor out = Tensor::Empty({T, Hq * D}, dtype);
  PagedAttention(q, out, Tensor::FromHost(encode(query_all).data(), {T, Hq * D}, dtype), kc, vc,
                 Tensor::FromHost(tables.data(), {S, max_blocks}, DType::kI32),
                 Tensor::FromHost(lens.data(), {S}, DType::kI32), Tensor::FromHost(qsl.data(), {S + 1}, DType::kI32),
                 scale);
  std::vector<uint8_t> raw(out.nbytes());
  out.CopyToHost(raw.data());
  double max_err = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = 0; r < seqs[s].n_new; ++r) {
      const int64_t pos = seqs[s].ctx - seqs[s].n_new + r, t = qsl[s] + r;
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / (Hq / Hk);
        std::vector<double> sc(pos + 1);
        for (int64_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(Qs[s][(r * Hq + h) * D + i]) * K[s][(j * Hk + kh) * D + i];
          sc[j] = d * scale;
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - m));
        for (int64_t i = 0; i < D; ++i) {
          double ref = 0;
          for (int64_t j = 0; j <= pos; ++j) ref += sc[j] / z * V[s][(j * Hk + kh) * D + i];
          const size_t idx = static_cast<size_t>((t * Hq + h) * D + i);
          float got;
          if (dtype == DType::kBF16) {
            uint16_t hb;
            std::memcpy(&hb, &raw[idx * 2], 2);
            got = Bf16ToFloat(hb);
          } else {
            std::memcpy(&got, &raw[idx * 4], 4);
          }
          max_err = std::max(max_err, std::fabs(got - ref));
        }
      }
    }
  return max_err;
}

// Every case runs at every CPU ISA level this processor has: the vector kernels where the
// head size is a multiple of their width (scalar: always the portable loops).
TEST(PagedAttentionOp, PrefillBatchGqaF32) {
  // Two sequences: a fresh prompt of 37 and a chunk of 5 after 20 cached tokens.
  for (CpuIsa isa : vt_test::IsaLevels())
    for (int threads : {1, 3}) {
      Queue q = Queue::Cpu(threads, isa);
      EXPECT_LT(RunCase(q, DType::kF32, 4, 2, 16, 8, {{37, 37, {}}, {25, 5, {}}}, 1), 2e-6)
          << threads << " " << CpuIsaName(isa);
    }
}

TEST(PagedAttentionOp, DecodeMqaAndMha) {
  for (CpuIsa isa : vt_test::IsaLevels()) {
    Queue q = Queue::Cpu(2, isa);
    EXPECT_LT(RunCase(q, DType::kF32, 8, 1, 32, 16, {{50, 1, {}}, {1, 1, {}}, {17, 1, {}}}, 2), 2e-6)
        << CpuIsaName(isa);
    EXPECT_LT(RunCase(q, DType::kF32, 3, 3, 8, 4, {{9, 1, {}}}, 3), 2e-6) << CpuIsaName(isa);
  }
}

TEST(PagedAttentionOp, ModelHeadSizeAndLongBlocks) {
  // D = 128 as in the models; blocks of 80 tokens, more keys than one pass of the vector
  // kernel (64), so a block's keys take two passes with the running max carried between.
  for (CpuIsa isa : vt_test::IsaLevels()) {
    Queue q = Queue::Cpu(2, isa);
    EXPECT_LT(RunCase(q, DType::kF32, 4, 2, 128, 80, {{200, 200, {}}, {90, 3, {}}}, 5), 2e-6) << CpuIsaName(isa);
  }
}

TEST(PagedAttentionOp, Bf16RoundsTheResultOnce) {
  // Inputs are BF16; the f32 result is rounded once: error <= half a BF16 ulp of |out| <= ~4
  // (2^-8 * 4 / 2) plus the f32 arithmetic.
  for (CpuIsa isa : vt_test::IsaLevels()) {
    Queue q = Queue::Cpu(2, isa);
    EXPECT_LT(RunCase(q, DType::kBF16, 4, 2, 64, 16, {{70, 70, {}}, {33, 1, {}}}, 4), 8e-3) << CpuIsaName(isa);
  }
}

// Decode steps (one query row per sequence) in the models' layouts: the vector kernels read
// each block's key and value rows in the cache's own dtype (BF16 here, F32 below), once for
// up to four heads of a GQA group (groups of 2, and of 6: a pass of four heads and one of
// two). The count of (block, KV head) pairs read in place proves that path ran wherever a
// kernel set exists; a prefill chunk (more rows) never takes it. With three threads the
// 1000-token context is cut into pieces whose softmax states are combined (counted too).
TEST(PagedAttentionOp, DecodeReadsTheCacheInPlace) {
  for (CpuIsa isa : vt_test::IsaLevels())
    for (int threads : {1, 2, 3}) {
      Queue q = Queue::Cpu(threads, isa);
      const bool vector = cpu::attention::ForIsa(q.cpu_isa(), 64) != nullptr;
      int64_t before = cpu::attention::BlocksReadInPlace();
      EXPECT_LT(RunCase(q, DType::kBF16, 16, 8, 128, 16, {{300, 1, {}}, {45, 1, {}}, {16, 1, {}}}, 6), 8e-3)
          << CpuIsaName(isa);
      EXPECT_LT(RunCase(q, DType::kF32, 24, 4, 64, 16, {{100, 1, {}}, {7, 1, {}}}, 7), 2e-6) << CpuIsaName(isa);
      EXPECT_EQ(cpu::attention::BlocksReadInPlace() - before, vector ? (19 + 3 + 1) * 8 + (7 + 1) * 4 : 0)
          << CpuIsaName(isa);
      before = cpu::attention::BlocksReadInPlace();
      const int64_t combined = cpu::attention::PiecesCombined();
      EXPECT_LT(RunCase(q, DType::kF32, 16, 4, 64, 16, {{1000, 1, {}}, {3, 1, {}}}, 9), 2e-6) << CpuIsaName(isa);
      EXPECT_EQ(cpu::attention::BlocksReadInPlace() - before, vector ? (63 + 1) * 4 : 0) << CpuIsaName(isa);
      // 64 blocks, pieces of at least 8 and about 64 / (2 threads): 6 pieces with three
      // threads, 4 with two, 2 with one.
      EXPECT_EQ(cpu::attention::PiecesCombined() - combined, vector ? std::max(2, 2 * threads) : 0)
          << CpuIsaName(isa) << " " << threads;
      before = cpu::attention::BlocksReadInPlace();
      EXPECT_LT(RunCase(q, DType::kF32, 16, 8, 128, 16, {{40, 2, {}}, {30, 30, {}}}, 8), 2e-6) << CpuIsaName(isa);
      EXPECT_EQ(cpu::attention::BlocksReadInPlace() - before, 0) << CpuIsaName(isa);
    }
}

// The tile kernel's (block, item) widenings for a batch's prefill sequences (n_new > 1):
// items of PrefillItemRows(group) rows per KV head (heads not split: the cases below have at
// least as many items as threads), each widening the blocks up to its last row's position
// once. The old path widened them once per 32 rows.
int64_t TileWidenings(int64_t Hq, int64_t Hk, int64_t block_size, const std::vector<Seq>& seqs) {
  const int64_t rows = cpu::attention::PrefillItemRows(Hq / Hk);
  int64_t total = 0;
  for (const Seq& s : seqs) {
    if (s.n_new < 2) continue;
    for (int64_t r0 = 0; r0 < s.n_new; r0 += rows) {
      const int64_t last = s.ctx - s.n_new + std::min(s.n_new, r0 + rows) - 1;
      total += Hk * (last / block_size + 1);
    }
  }
  return total;
}

// Long prompts, whole and as a later chunk over cached tokens (positions 520..759), beside
// a decode row, at GQA ratios 1, 2, 4, 8 and 6 (Hq / Hk): every vector level runs the
// prefill rows through attend_tile, each block widened once per item (counted), within the
// bounds of the tests above. Rows per item make several vector tiles, tiles whose queries
// see only part of a block, and items that start past a block's first key.
TEST(PagedAttentionOp, PrefillTilesOverLongPromptsAndChunks) {
  struct Heads {
    int64_t Hq, Hk, D;
  };
  for (CpuIsa isa : vt_test::IsaLevels()) {
    int threads = 1;
    for (const Heads& h : {Heads{8, 8, 64}, Heads{8, 4, 64}, Heads{8, 2, 128}, Heads{8, 1, 64}, Heads{12, 2, 64}}) {
      threads = 4 - threads;  // 3, 1, 3, ...
      Queue q = Queue::Cpu(threads, isa);
      const bool vector = cpu::attention::ForIsa(q.cpu_isa(), h.D) != nullptr;
      const std::vector<Seq> seqs = {{600, 180, {}}, {261, 261, {}}, {90, 1, {}}};
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        const int64_t before = cpu::attention::TileBlocksWidened();
        EXPECT_LT(RunCase(q, dtype, h.Hq, h.Hk, h.D, 16, seqs, 11), dtype == DType::kF32 ? 2e-6 : 8e-3)
            << CpuIsaName(isa) << " " << threads << " " << h.Hq << "/" << h.Hk << " " << DTypeName(dtype);
        EXPECT_EQ(cpu::attention::TileBlocksWidened() - before, vector ? TileWidenings(h.Hq, h.Hk, 16, seqs) : 0)
            << CpuIsaName(isa) << " " << h.Hq << "/" << h.Hk;
      }
    }
    // Blocks longer than a pass of the tile kernel (32 keys), of a size no vector divides;
    // a head size that is not a whole number of the score product's runs (16 elements).
    Queue q = Queue::Cpu(2, isa);
    const std::vector<Seq> seqs = {{300, 170, {}}, {77, 77, {}}};
    for (int64_t D : {32, 40}) {
      const int64_t before = cpu::attention::TileBlocksWidened();
      EXPECT_LT(RunCase(q, DType::kF32, 4, 1, D, 45, seqs, 12), 2e-6) << CpuIsaName(isa) << " D " << D;
      const bool vector = cpu::attention::ForIsa(q.cpu_isa(), D) != nullptr;
      EXPECT_EQ(cpu::attention::TileBlocksWidened() - before, vector ? TileWidenings(4, 1, 45, seqs) : 0)
          << CpuIsaName(isa) << " D " << D;
    }
  }
}

TEST(KvCacheWriteOp, PlacesRowsBySlotAndSkipsNegativeSlots) {
  Queue q = Queue::Cpu(1);
  const int64_t nb = 3, bs = 2, Hk = 1, D = 2;
  std::vector<float> zeros(nb * bs * Hk * D, 0.0f);
  Tensor kc = Tensor::FromHost(zeros.data(), {nb, bs, Hk, D}, DType::kF32);
  Tensor vc = Tensor::FromHost(zeros.data(), {nb, bs, Hk, D}, DType::kF32);
  const std::vector<float> k = {1, 2, 3, 4, 5, 6}, v = {-1, -2, -3, -4, -5, -6};
  const std::vector<int64_t> slots = {5, -1, 0};
  KvCacheWrite(q, Tensor::FromHost(k.data(), {3, 2}, DType::kF32), Tensor::FromHost(v.data(), {3, 2}, DType::kF32),
               kc, vc, Tensor::FromHost(slots.data(), {3}, DType::kI64));
  std::vector<float> gk(zeros.size()), gv(zeros.size());
  kc.CopyToHost(gk.data());
  vc.CopyToHost(gv.data());
  EXPECT_EQ(gk, (std::vector<float>{5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2}));
  EXPECT_EQ(gv, (std::vector<float>{-5, -6, 0, 0, 0, 0, 0, 0, 0, 0, -1, -2}));
  const std::vector<int64_t> bad = {6, 0, 0};
  try {
    KvCacheWrite(q, Tensor::FromHost(k.data(), {3, 2}, DType::kF32), Tensor::FromHost(v.data(), {3, 2}, DType::kF32),
                 kc, vc, Tensor::FromHost(bad.data(), {3}, DType::kI64));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot_mapping[0] = 6"), std::string::npos) << e.what();
  }
}

TEST(PagedAttentionOp, InconsistentMetadataIsAnError) {
  Queue q = Queue::Cpu(1);
  Tensor kc = Tensor::Empty({2, 4, 1, 8}, DType::kF32), vc = Tensor::Empty({2, 4, 1, 8}, DType::kF32);
  Tensor query = Tensor::Empty({3, 16}, DType::kF32), out = Tensor::Empty({3, 16}, DType::kF32);
  auto run = [&](std::vector<int32_t> table, std::vector<int32_t> lens, std::vector<int32_t> qsl) {
    PagedAttention(q, out, query, kc, vc, Tensor::FromHost(table.data(), {1, 2}, DType::kI32),
                   Tensor::FromHost(lens.data(), {1}, DType::kI32), Tensor::FromHost(qsl.data(), {2}, DType::kI32),
                   0.5f);
  };
  auto message = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { run({0, 1}, {2}, {0, 3}); }).find("3 new query rows but seq_lens[0] = 2"),
            std::string::npos);
  EXPECT_NE(message([&] { run({0, 1}, {9}, {0, 3}); }).find("exceeds its 2 block-table entries"), std::string::npos);
  EXPECT_NE(message([&] { run({0, 7}, {6}, {0, 3}); }).find("block_tables[0, 1] = 7"), std::string::npos);
  // Heads that do not divide: 16 / 8 = 2 query heads but the cache below has 3 KV heads.
  Tensor kc3 = Tensor::Empty({2, 4, 3, 8}, DType::kF32);
  EXPECT_THROW(PagedAttention(q, out, query, kc3, kc3, Tensor::Empty({1, 2}, DType::kI32),
                              Tensor::Empty({1}, DType::kI32), Tensor::Empty({2}, DType::kI32), 0.5f),
               Error);
}

}  // namespace
}  // namespace vt
