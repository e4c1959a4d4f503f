// Embedding, RotaryEmbedding, KvCacheWrite and PagedAttention on CUDA: bad indices refused
// by name, and PagedAttention against the CPU kernel (a peer implementation) and a float64
// reference written from the op's contract, within the tolerances stated at AttnTol (its
// f32 sums run in a different order on each backend). Agreement with the CPU kernels of
// Embedding, RotaryEmbedding and KvCacheWrite is the op table's check
// (tests/vt/op_table_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>

#include "../vt/op_table.h"  // MakePagedBatch
#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"  // PrefillMmaLaunches
#include "vt/ops/attention.h"
#include "vt/ops/embedding.h"
#include "vt/ops/rope.h"

namespace {

using vt::DType;
using vt::OpId;

int64_t Count(OpId op) { return vt::DispatchCount(op, vt::DeviceType::kCUDA); }

using vtt::Normal;

template <typename T>
vt::Tensor IndexTensor(const std::vector<T>& v, DType d, vt::Device dev) {
  return vt::Tensor::FromHost(v.data(), {static_cast<int64_t>(v.size())}, d, dev);
}

// One unit in the last place of dtype d at magnitude |x| (the spacing of d's values there).
double Ulp(DType d, double x) {
  const int mant = d == DType::kF32 ? 23 : d == DType::kBF16 ? 7 : 10;
  const double min_normal = d == DType::kF32 ? 0x1p-126 : d == DType::kBF16 ? 0x1p-126 : 0x1p-14;
  const double a = std::max(std::fabs(x), min_normal);
  return std::exp2(std::floor(std::log2(a)) - mant);
}

TEST(CudaModelOps, EmbeddingRefusesIdOutsideTable) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  vt::Tensor table = vt::Tensor::Empty({10, 8}, DType::kBF16, vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty({3, 8}, DType::kBF16, vtt::kCuda);
  for (int32_t bad : {10, -1}) {
    const std::vector<int32_t> ids = {1, bad, 2};
    try {
      vt::Embedding(gpu, out, table, IndexTensor(ids, DType::kI32, vtt::kCuda));
      gpu.Synchronize();  // the kernel found it; the next synchronization reports it
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const vt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("ids[1] = " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(CudaModelOps, RotaryEmbeddingRefusesPositionOutsideCache) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  vt::Tensor cache = vt::Tensor::Empty({16, 8}, DType::kF32, vtt::kCuda);
  vt::Tensor qt = vt::Tensor::Empty({2, 16}, DType::kBF16, vtt::kCuda);
  const std::vector<int64_t> pos = {3, 16};
  EXPECT_THROW(
      {
        try {
          vt::RotaryEmbedding(gpu, IndexTensor(pos, DType::kI64, vtt::kCuda), qt, nullptr, cache, 8);
          gpu.Synchronize();
        } catch (const vt::Error& e) {
          EXPECT_NE(std::string(e.what()).find("positions[1] = 16"), std::string::npos) << e.what();
          throw;
        }
      },
      vt::Error);
}

// A slot past the cache is refused by name.
TEST(CudaModelOps, KvCacheWriteRefusesSlotPastCache) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  vt::Tensor kc = vt::Tensor::Empty({2, 4, 1, 8}, DType::kBF16, vtt::kCuda);
  vt::Tensor k = vt::Tensor::Empty({1, 8}, DType::kBF16, vtt::kCuda);
  const std::vector<int64_t> bad = {8};
  try {
    vt::KvCacheWrite(gpu, k, k, kc, kc, IndexTensor(bad, DType::kI64, vtt::kCuda));
    gpu.Synchronize();
    ADD_FAILURE() << "slot 8 of 8 accepted";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot_mapping[0] = 8"), std::string::npos) << e.what();
  }
}

// A batch of sequences for PagedAttention: per sequence, its cached length and new rows.
struct Seq {
  int64_t ctx, n;
};

struct AttnCase {
  int64_t Hq, Hk, D, block_size;
  std::vector<Seq> seqs;
};

// Tolerances of PagedAttention, as |got - ref| per output element:
//   vs the CPU kernel: 2 ulp of the output dtype at |ref| + 1e-5 (f32 sums in another
//     order, then one rounding each; the 2 ulp cover the two roundings straddling a tie);
//   vs the float64 reference: 2 ulp of the dtype + 2e-5 (the f32 exp/sums of either backend).
double AttnTol(DType d, double ref, bool vs_f64) { return 2.0 * Ulp(d, ref) + (vs_f64 ? 2e-5 : 1e-5); }

// Returns the CUDA output's bytes.
std::vector<uint8_t> RunAttentionCase(const AttnCase& c, DType d, uint32_t seed) {
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  std::vector<std::pair<int64_t, int64_t>> seqs;
  for (const Seq& s : c.seqs) seqs.emplace_back(s.ctx, s.n);
  const vt_table::PagedBatch batch = vt_table::MakePagedBatch(seqs, c.block_size, seed);
  const int64_t S = batch.S, T = batch.T, max_blocks = batch.max_blocks, num_blocks = batch.num_blocks;
  const std::vector<int32_t>& tables = batch.tables;
  const std::vector<int32_t>& lens = batch.lens;
  const std::vector<int32_t>& qsl = batch.query_start_loc;
  const vt::Shape cshape{num_blocks, c.block_size, c.Hk, c.D};
  const size_t cn = static_cast<size_t>(num_blocks * c.block_size * c.Hk * c.D);
  vt::Tensor kc = vtt::HostTensor(Normal(cn, seed + 1), d, cshape);
  vt::Tensor vc = vtt::HostTensor(Normal(cn, seed + 2), d, cshape);
  vt::Tensor qh = vtt::HostTensor(Normal(static_cast<size_t>(T * c.Hq * c.D), seed + 3, 1.5f), d, {T, c.Hq * c.D});
  vt::Tensor bt = vt::Tensor::FromHost(tables.data(), {S, max_blocks}, DType::kI32);
  vt::Tensor sl = vt::Tensor::FromHost(lens.data(), {S}, DType::kI32);
  vt::Tensor ql = vt::Tensor::FromHost(qsl.data(), {S + 1}, DType::kI32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  vt::Tensor out = vt::Tensor::Empty({T, c.Hq * c.D}, d);
  vt::PagedAttention(cpu, out, qh, kc, vc, bt, sl, ql, scale);
  vt::Tensor out_gpu = vt::Tensor::Empty({T, c.Hq * c.D}, d, vtt::kCuda);
  const int64_t before = Count(OpId::kPagedAttention);
  vt::PagedAttention(gpu, out_gpu, qh.To(vtt::kCuda), kc.To(vtt::kCuda), vc.To(vtt::kCuda), bt.To(vtt::kCuda),
                     sl.To(vtt::kCuda), ql.To(vtt::kCuda), scale);
  EXPECT_EQ(Count(OpId::kPagedAttention), before + 1);

  // float64 reference straight from the contract, reading the cache through the tables.
  const std::vector<float> q = vtt::Floats(qh), kf = vtt::Floats(kc), vf = vtt::Floats(vc);
  const std::vector<float> got = vtt::Floats(out_gpu), cpu_out = vtt::Floats(out);
  const int64_t group = c.Hq / c.Hk;
  size_t bad_cpu = 0, bad_ref = 0;
  double worst_cpu = 0, worst_ref = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t r = 0; r < c.seqs[s].n; ++r) {
      const int64_t t = qsl[s] + r, pos = c.seqs[s].ctx - c.seqs[s].n + r;
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t kh = h / group;
        // Where token j's row of this KV head starts in either cache.
        auto row = [&](int64_t j) {
          const int64_t blk = tables[s * max_blocks + j / c.block_size];
          return static_cast<size_t>(((blk * c.block_size + j % c.block_size) * c.Hk + kh) * c.D);
        };
        std::vector<double> sc(static_cast<size_t>(pos + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          const size_t kr = row(j);
          for (int64_t i = 0; i < c.D; ++i)
            dot += static_cast<double>(q[(t * c.Hq + h) * c.D + i]) * static_cast<double>(kf[kr + i]);
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        // Each output sums its terms in token order; the tokens walk the cache rows once
        // (an output at a time re-read the whole context for every one of the D outputs).
        std::vector<double> acc(static_cast<size_t>(c.D), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          const size_t vr = row(j);
          for (int64_t i = 0; i < c.D; ++i) acc[i] += sc[j] * static_cast<double>(vf[vr + i]);
        }
        for (int64_t i = 0; i < c.D; ++i) {
          const double o = acc[i] / sum;
          const size_t e = static_cast<size_t>((t * c.Hq + h) * c.D + i);
          const double ec = std::fabs(got[e] - static_cast<double>(cpu_out[e]));
          const double er = std::fabs(got[e] - o);
          if (!(ec <= AttnTol(d, cpu_out[e], false))) ++bad_cpu;
          if (!(er <= AttnTol(d, o, true))) ++bad_ref;
          worst_cpu = std::max(worst_cpu, ec);
          worst_ref = std::max(worst_ref, er);
        }
      }
    }
  }
  EXPECT_EQ(bad_cpu, 0u) << "vs CPU: Hq " << c.Hq << " Hk " << c.Hk << " D " << c.D << " " << vt::DTypeName(d)
                         << " worst " << worst_cpu;
  EXPECT_EQ(bad_ref, 0u) << "vs f64: Hq " << c.Hq << " Hk " << c.Hk << " D " << c.D << " " << vt::DTypeName(d)
                         << " worst " << worst_ref;
  return vtt::Bytes(out_gpu);
}

TEST(CudaModelOps, PagedAttentionPrefillMatchesCpuAndReference) {
  VT_REQUIRE_CUDA();
  // Fresh prompts, a chunked prefill over earlier context, rows spanning several tiles.
  const std::vector<AttnCase> cases = {
      {4, 2, 32, 16, {{5, 5}, {40, 40}, {70, 9}}},         // GQA 2, the fixture model's geometry
      {8, 1, 64, 16, {{33, 33}, {100, 3}}},                // MQA
      {6, 6, 128, 8, {{77, 77}}},                          // MHA, small blocks
      {16, 2, 256, 16, {{20, 20}, {65, 17}}},              // the largest head size, GQA 8
      {16, 2, 256, 16, {{300, 300}, {150, 70}}},           // the same over enough rows for tensor cores
      {12, 4, 80, 16, {{3, 3}, {1, 1}, {48, 48}}},         // a head size not a multiple of 32
      {8, 2, 64, 16, {{50, 50}, {600, 1}, {30, 1}}},       // a mixed batch: a prompt and two decodes
      {16, 8, 64, 16, {{400, 400}}},                       // enough CTAs that the context is not split
      {32, 8, 128, 16, {{700, 600}, {130, 130}, {9, 1}}},  // chunked prefill, a prompt, a decode row; GQA 4
      // six prompts and chunks of 129..256 rows: the tensor-core kernel's CTAs found by a
      // search over query_start_loc across sequences
      {8, 2, 64, 16, {{130, 130}, {300, 200}, {129, 129}, {256, 256}, {140, 140}, {200, 131}}},
  };
  // Sixty sequences of 1..13 new rows over 0..89 earlier tokens, GQA 4: every sequence's
  // groups of query vectors, whatever the rows before it, land on their own CTAs.
  AttnCase many{16, 4, 64, 16, {}};
  for (int64_t i = 0; i < 60; ++i) {
    const int64_t n = 1 + (i * 7) % 13;
    many.seqs.push_back({n + (i * 11) % 90, n});
  }
  RunAttentionCase(many, DType::kBF16, 90);
  RunAttentionCase(many, DType::kF32, 91);
  // BF16 cases with head size 64, 128 or 256 (sm_90: Q in shared memory) and at least 64
  // rows per sequence on average take the tensor-core prefill kernel (attention_prefill.cu):
  // five of them here; and so do the
  // prompt rows of the two with decode rows beside them (mixed steps: the tensor-core decode
  // kernel takes the one-row sequences at any batch).
  const int64_t mma_before = vt::cuda::PrefillMmaLaunches();
  uint32_t seed = 100;
  for (const auto& c : cases)
    for (DType d : {DType::kBF16, DType::kF32, DType::kF16}) RunAttentionCase(c, d, seed += 7);
  EXPECT_EQ(vt::cuda::PrefillMmaLaunches() - mma_before, 5 + 2);
}

// A CUDA graph records a decode launch for the widest block table, so its context splits are
// sized for max_model_len and a short context leaves most of them empty: their CTAs return
// at once and the last CTA of the others combines them (attention_split.cuh). Here one long
// sequence widens the block tables (11 splits of the four-warp form on a 132-SM GPU, 2 of
// the wide form; BF16 runs both, VT_CUDA_ATTN_DECODE_WIDE) and the short contexts leave
// most of their splits empty: each kernel's output matches the CPU and the float64 reference
// (RunAttentionCase) and, byte for byte, the same launch with the empty splits run
// (VT_CUDA_ATTN_SKIP_EMPTY_SPLITS=0), also where one split holds a whole context (1 to 40
// tokens) and its CTA writes the output itself (OneSplitOut). Then contexts of up to 320
// tokens are served by one split (VT_CUDA_ATTN_ONE_SPLIT_TOKENS): the 300-token one changes
// its partition (checked against the references), every other row keeps its bytes.
TEST(CudaModelOps, DecodeEmptySplitsSkippedWithTheSameBytes) {
  VT_REQUIRE_CUDA();
  const AttnCase c{16, 8, 128, 16, {{1500, 1}, {1, 1}, {17, 1}, {40, 1}, {300, 1}, {33, 1}}};
  setenv("VT_CUDA_ATTN_DECODE", "always", 1);  // F16 on the CUDA-core decode kernel at 6 sequences
  setenv("VT_CUDA_ATTN_ONE_SPLIT_TOKENS", "0", 1);
  for (const auto& [d, wide] : {std::pair{DType::kBF16, "always"}, std::pair{DType::kBF16, "0"},
                                std::pair{DType::kF16, "0"}}) {
    setenv("VT_CUDA_ATTN_DECODE_WIDE", wide, 1);
    SCOPED_TRACE(std::string("VT_CUDA_ATTN_DECODE_WIDE=") + wide);
    const int64_t fused0 = vt::cuda::DecodeSplitsCombinedInLaunch();
    const int64_t skip0 = vt::cuda::DecodeLaunchesSkippingEmptySplits();
    const int64_t one0 = vt::cuda::DecodeLaunchesWithOneSplitContexts();
    const std::vector<uint8_t> skipped = RunAttentionCase(c, d, 700);
    EXPECT_EQ(vt::cuda::DecodeSplitsCombinedInLaunch() - fused0, 1) << vt::DTypeName(d);
    EXPECT_EQ(vt::cuda::DecodeLaunchesSkippingEmptySplits() - skip0, 1) << vt::DTypeName(d);
    setenv("VT_CUDA_ATTN_SKIP_EMPTY_SPLITS", "0", 1);
    const std::vector<uint8_t> all = RunAttentionCase(c, d, 700);
    unsetenv("VT_CUDA_ATTN_SKIP_EMPTY_SPLITS");
    EXPECT_EQ(vt::cuda::DecodeLaunchesSkippingEmptySplits() - skip0, 1) << vt::DTypeName(d);
    EXPECT_EQ(skipped, all) << vt::DTypeName(d) << ": skipping the empty splits changed the output";
    EXPECT_EQ(vt::cuda::DecodeLaunchesWithOneSplitContexts() - one0, 0) << vt::DTypeName(d);
    setenv("VT_CUDA_ATTN_ONE_SPLIT_TOKENS", "320", 1);
    std::vector<uint8_t> one = RunAttentionCase(c, d, 700);
    setenv("VT_CUDA_ATTN_ONE_SPLIT_TOKENS", "0", 1);
    EXPECT_EQ(vt::cuda::DecodeLaunchesWithOneSplitContexts() - one0, 1) << vt::DTypeName(d);
    // Rows are [sequence][Hq][D]: sequence 4 (300 tokens) is the one whose partition changed
    // (its rounded output may or may not show it: RunAttentionCase checked it).
    const size_t row = all.size() / c.seqs.size();
    ASSERT_EQ(one.size(), all.size());
    std::copy(all.begin() + 4 * row, all.begin() + 5 * row, one.begin() + 4 * row);
    EXPECT_EQ(one, all) << vt::DTypeName(d) << ": serving short contexts by one split changed other rows";
  }
  unsetenv("VT_CUDA_ATTN_DECODE_WIDE");
  unsetenv("VT_CUDA_ATTN_ONE_SPLIT_TOKENS");
  unsetenv("VT_CUDA_ATTN_DECODE");
}

TEST(CudaModelOps, PagedAttentionDecodeMatchesCpuAndReference) {
  VT_REQUIRE_CUDA();
  // One new row per sequence, contexts from 1 token to 8192.
  const std::vector<AttnCase> cases = {
      {4, 2, 32, 16, {{1, 1}, {17, 1}, {300, 1}}},
      {32, 8, 128, 16, {{513, 1}, {64, 1}}},
      {8, 1, 64, 32, {{1000, 1}}},
      {32, 4, 128, 16, {{8192, 1}, {4000, 1}, {1, 1}}},  // GQA 8, the longest contexts, split across CTAs
  };
  // Cases with head size 64 or 128 and up to 8 query heads per KV head take a decode kernel:
  // BF16 the tensor-core one (attention_decode_mma.cu), F16 the CUDA-core one
  // (attention_decode.cu); F32 takes the general kernel. The CUDA-core decode kernel is
  // chosen from 8 sequences on; "always" makes these small batches take it too. Split
  // contexts are combined by the decode kernels' last CTAs (attention_split.cuh).
  setenv("VT_CUDA_ATTN_DECODE", "always", 1);
  const int64_t decode_before = vt::cuda::DecodeAttentionLaunches(), mma_before = vt::cuda::DecodeMmaLaunches();
  const int64_t heads_n_before = vt::cuda::DecodeMmaHeadsNLaunches();
  const int64_t fused_before = vt::cuda::DecodeSplitsCombinedInLaunch();
  uint32_t seed = 500;
  for (const auto& c : cases)
    for (DType d : {DType::kBF16, DType::kF32}) RunAttentionCase(c, d, seed += 7);
  // A decode step of 256 sequences (one CTA per sequence and KV head: the general grid once
  // had T * S of them), contexts of every length up to 300.
  AttnCase wide{32, 8, 128, 16, {}};
  for (int64_t i = 0; i < 256; ++i) wide.seqs.push_back({1 + (i * 37) % 300, 1});
  RunAttentionCase(wide, DType::kBF16, 490);
  // Other geometries: one query head per KV head, three of a bucket of four, head size 64;
  // T == S with a sequence of two rows beside one of none (served row by row).
  const std::vector<AttnCase> odd = {
      {4, 4, 128, 16, {{70, 1}, {5, 1}}},
      {12, 4, 64, 16, {{100, 1}, {33, 1}, {1, 1}}},
      {16, 4, 64, 16, {{9, 2}, {20, 0}, {33, 1}}},
  };
  for (const auto& c : odd)
    for (DType d : {DType::kF16, DType::kBF16}) RunAttentionCase(c, d, seed += 7);
  EXPECT_EQ(vt::cuda::DecodeAttentionLaunches() - decode_before, 4 + 3 + 3);
  EXPECT_EQ(vt::cuda::DecodeMmaLaunches() - mma_before, 4 + 3);
  EXPECT_EQ(vt::cuda::DecodeMmaHeadsNLaunches() - heads_n_before, vtt::DecodeHeadsNOn(false) ? 4 + 3 : 0);
  // Few sequences: every decode launch split its contexts (the 256-sequence one did not).
  EXPECT_EQ(vt::cuda::DecodeSplitsCombinedInLaunch() - fused_before, 4 + 3 + 3 - 1);
  // The same splits combined by the combine kernel after the launch.
  setenv("VT_CUDA_ATTN_FUSED_COMBINE", "0", 1);
  const int64_t unfused_before = vt::cuda::DecodeSplitsCombinedInLaunch();
  RunAttentionCase(cases[3], DType::kBF16, 8000);
  RunAttentionCase(odd[2], DType::kF16, 8001);
  EXPECT_EQ(vt::cuda::DecodeSplitsCombinedInLaunch() - unfused_before, 0);
  unsetenv("VT_CUDA_ATTN_FUSED_COMBINE");
  // The CUDA-core kernel on BF16 too (VT_CUDA_ATTN_DECODE_MMA=0).
  setenv("VT_CUDA_ATTN_DECODE_MMA", "0", 1);
  const int64_t core_before = vt::cuda::DecodeMmaLaunches();
  RunAttentionCase(cases[3], DType::kBF16, 9000);
  RunAttentionCase(wide, DType::kBF16, 9003);
  RunAttentionCase(odd[2], DType::kBF16, 9004);
  EXPECT_EQ(vt::cuda::DecodeMmaLaunches() - core_before, 0);
  unsetenv("VT_CUDA_ATTN_DECODE_MMA");
  // Without the override: the tensor-core decode kernel at any batch (2 sequences here, and
  // 256), the CUDA-core one from 8 sequences (2 F16 ones take the general kernel).
  unsetenv("VT_CUDA_ATTN_DECODE");
  const int64_t default_before = vt::cuda::DecodeAttentionLaunches();
  RunAttentionCase(cases[1], DType::kBF16, 9001);
  RunAttentionCase(wide, DType::kBF16, 9002);
  RunAttentionCase(cases[1], DType::kF16, 9005);
  EXPECT_EQ(vt::cuda::DecodeAttentionLaunches() - default_before, 2);
  // Mixed steps, as serving with chunked prefill has: 120 decode rows over contexts of
  // 1..500 beside prompt chunks of 2..150 rows; and 8 decode rows over 3,000..4,800 tokens
  // beside a 40-row chunk (few CTAs: the decode rows' contexts split across CTAs, and the
  // combine leaves the chunk's rows alone). BF16 takes a decode kernel for the one-row
  // sequences and the tensor-core prefill for the others; F16 and F32 the general kernel.
  AttnCase mixed{32, 8, 128, 16, {{150, 150}, {400, 17}, {9, 2}, {64, 64}, {700, 130}}};
  for (int64_t i = 0; i < 120; ++i) mixed.seqs.insert(mixed.seqs.begin() + i % 5, {1 + (i * 41) % 500, 1});
  AttnCase long_mixed{32, 8, 128, 16, {{2000, 40}}};
  for (int64_t i = 0; i < 8; ++i) long_mixed.seqs.insert(long_mixed.seqs.begin() + i % 2, {3000 + 257 * i, 1});
  for (const AttnCase* c : {&mixed, &long_mixed})
    for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
      const int64_t dec0 = vt::cuda::DecodeAttentionLaunches(), mma0 = vt::cuda::DecodeMmaLaunches();
      const int64_t pre0 = vt::cuda::PrefillMmaLaunches();
      RunAttentionCase(*c, d, seed += 7);
      const int64_t want = d == DType::kBF16 ? 1 : 0;
      EXPECT_EQ(vt::cuda::DecodeAttentionLaunches() - dec0, want) << vt::DTypeName(d);
      EXPECT_EQ(vt::cuda::DecodeMmaLaunches() - mma0, want) << vt::DTypeName(d);
      EXPECT_EQ(vt::cuda::PrefillMmaLaunches() - pre0, want) << vt::DTypeName(d);
    }
  // The same steps with the decode rows on the CUDA-core kernel.
  setenv("VT_CUDA_ATTN_DECODE_MMA", "0", 1);
  const int64_t core0 = vt::cuda::DecodeAttentionLaunches(), pre0 = vt::cuda::PrefillMmaLaunches();
  RunAttentionCase(mixed, DType::kBF16, seed += 7);
  RunAttentionCase(long_mixed, DType::kBF16, seed += 7);
  EXPECT_EQ(vt::cuda::DecodeAttentionLaunches() - core0, 2);
  EXPECT_EQ(vt::cuda::PrefillMmaLaunches() - pre0, 2);
  unsetenv("VT_CUDA_ATTN_DECODE_MMA");
}

// The wide form of the tensor-core decode kernel (kWideTeams teams of four warps taking a
// context's tiles side by side, DecodeMmaWide): taken by default when the step's (sequence,
// KV head) pairs do not fill the GPU, here forced at any batch and then switched off, over
// contexts of 1 to 8192 tokens (one tile per team, several rounds of tiles, split contexts
// combined in the launch), GQA 1 to 8, head sizes 64 and 128, a 256-sequence step and a
// sequence of two rows served row by row: each launch within the bounds of the CPU kernel
// and the float64 reference, and counted as the form that ran.
TEST(CudaModelOps, DecodeWideFormMatchesCpuAndReference) {
  VT_REQUIRE_CUDA();
  if (vtt::DecodeHeadsNOn(false)) GTEST_SKIP() << "VT_CUDA_ATTN_DECODE_HEADS_N=1: BF16 caches take the N form";
  std::vector<AttnCase> cases = {
      {16, 8, 128, 16, {{1, 1}}},                                // the 0.6B / 8B geometry, one token
      {16, 8, 128, 16, {{160, 1}}},                              // three tiles: one a team
      {32, 4, 128, 16, {{130, 1}, {256, 1}, {257, 1}}},          // four and five tiles: a second round
      {32, 8, 128, 16, {{513, 1}, {64, 1}, {191, 1}}},           // GQA 4
      {8, 1, 64, 32, {{1000, 1}}},                               // MQA, head size 64, split
      {32, 4, 128, 16, {{8192, 1}, {4000, 1}, {1, 1}}},          // long contexts split across CTAs
      {4, 4, 128, 16, {{70, 1}, {5, 1}}},                        // one query head per KV head
      {16, 4, 64, 16, {{9, 2}, {20, 0}, {200, 1}}},              // two rows of one sequence, row by row
  };
  AttnCase many{32, 8, 128, 16, {}};
  for (int64_t i = 0; i < 256; ++i) many.seqs.push_back({1 + (i * 37) % 300, 1});
  cases.push_back(many);
  setenv("VT_CUDA_ATTN_DECODE", "always", 1);
  uint32_t seed = 1200;
  for (const char* wide : {"always", "0"}) {
    setenv("VT_CUDA_ATTN_DECODE_WIDE", wide, 1);
    const int64_t mma0 = vt::cuda::DecodeMmaLaunches(), wide0 = vt::cuda::DecodeMmaWideLaunches();
    for (const auto& c : cases) RunAttentionCase(c, DType::kBF16, seed += 7);
    const int64_t n = static_cast<int64_t>(cases.size());
    EXPECT_EQ(vt::cuda::DecodeMmaLaunches() - mma0, n) << "VT_CUDA_ATTN_DECODE_WIDE=" << wide;
    EXPECT_EQ(vt::cuda::DecodeMmaWideLaunches() - wide0, std::string(wide) == "0" ? 0 : n)
        << "VT_CUDA_ATTN_DECODE_WIDE=" << wide;
  }
  // By default: the wide form for few pairs (3 sequences x 8 KV heads: a GPU of at least 96
  // SMs), the four-warp form for many (256 x 8).
  unsetenv("VT_CUDA_ATTN_DECODE_WIDE");
  const int64_t wide0 = vt::cuda::DecodeMmaWideLaunches(), mma0 = vt::cuda::DecodeMmaLaunches();
  RunAttentionCase(cases[3], DType::kBF16, seed += 7);
  EXPECT_EQ(vt::cuda::DecodeMmaWideLaunches() - wide0, 1);
  RunAttentionCase(many, DType::kBF16, seed += 7);
  EXPECT_EQ(vt::cuda::DecodeMmaWideLaunches() - wide0, 1);
  EXPECT_EQ(vt::cuda::DecodeMmaLaunches() - mma0, 2);
  unsetenv("VT_CUDA_ATTN_DECODE");
}

// The decode attention right after the QK-norm/RoPE/cache-write prelude reads the context
// before its griddepcontrol.wait (AttnArgs::early_context), each team of the wide form its
// first tile, and the newest token (written by the prelude) after the wait. Contexts where
// that token falls in a tile staged early and in one staged after the wait (long contexts,
// several tiles a team), in both forms and for a step of 40 sequences (four-warp form): the
// output equals, byte for byte, the same step with early reads off
// (VT_CUDA_ATTN_EARLY_READS=0), and matches the CPU's prelude + attention within AttnTol.
TEST(CudaModelOps, DecodeAfterThePreludeReadsEarlyWithTheSameBytes) {
  VT_REQUIRE_CUDA();
  if (vtt::DecodeHeadsNOn(false)) GTEST_SKIP() << "VT_CUDA_ATTN_DECODE_HEADS_N=1: BF16 caches take the N form";
  const int64_t Hq = 16, Hk = 8, D = 128, bs = 16, max_pos = 5000;
  std::vector<float> cs(static_cast<size_t>(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      cs[p * D + i] = static_cast<float>(std::cos(p * std::pow(1e6, -2.0 * i / D)));
      cs[p * D + D / 2 + i] = static_cast<float>(std::sin(p * std::pow(1e6, -2.0 * i / D)));
    }
  std::vector<std::vector<int64_t>> steps = {{1}, {160}, {192}, {257}, {1000}, {4097}, {70, 600, 3000}};
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 40; ++i) many.push_back(1 + (i * 53) % 700);
  steps.push_back(many);
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  uint32_t seed = 2000;
  for (const char* wide : {"always", "0"})
    for (const auto& ctx : steps) {
      setenv("VT_CUDA_ATTN_DECODE_WIDE", wide, 1);
      SCOPED_TRACE(std::string("VT_CUDA_ATTN_DECODE_WIDE=") + wide + ", " + std::to_string(ctx.size()) +
                   " sequences, the first of " + std::to_string(ctx[0]) + " tokens");
      std::vector<std::pair<int64_t, int64_t>> seqs;
      for (int64_t c : ctx) seqs.emplace_back(c, 1);
      const vt_table::PagedBatch b = vt_table::MakePagedBatch(seqs, bs, seed += 7);
      std::vector<int64_t> pos, slots;
      for (int64_t s = 0; s < b.S; ++s) {
        pos.push_back(ctx[s] - 1);
        slots.push_back(b.tables[s * b.max_blocks + (ctx[s] - 1) / bs] * bs + (ctx[s] - 1) % bs);
      }
      const vt::Shape cshape{b.num_blocks, bs, Hk, D};
      const size_t cn = static_cast<size_t>(b.num_blocks * bs * Hk * D);
      const vt::Tensor kc = vtt::HostTensor(Normal(cn, seed + 1), DType::kBF16, cshape);
      const vt::Tensor vc = vtt::HostTensor(Normal(cn, seed + 2), DType::kBF16, cshape);
      const vt::Tensor q = vtt::HostTensor(Normal(static_cast<size_t>(b.S * Hq * D), seed + 3, 3.0f), DType::kBF16,
                                           {b.S, Hq * D});
      const vt::Tensor k = vtt::HostTensor(Normal(static_cast<size_t>(b.S * Hk * D), seed + 4, 3.0f), DType::kBF16,
                                           {b.S, Hk * D});
      const vt::Tensor v = vtt::HostTensor(Normal(static_cast<size_t>(b.S * Hk * D), seed + 5), DType::kBF16,
                                           {b.S, Hk * D});
      const vt::Tensor qn = vtt::HostTensor(Normal(static_cast<size_t>(D), seed + 6, 0.5f), DType::kF32, {D});
      const vt::Tensor kn = vtt::HostTensor(Normal(static_cast<size_t>(D), seed + 7, 0.5f), DType::kF32, {D});
      const vt::Tensor p = vt::Tensor::FromHost(pos.data(), {b.S}, DType::kI64);
      const vt::Tensor sm = vt::Tensor::FromHost(slots.data(), {b.S}, DType::kI64);
      const vt::Tensor c = vt::Tensor::FromHost(cs.data(), {max_pos, D}, DType::kF32);
      const vt::Tensor bt = vt::Tensor::FromHost(b.tables.data(), {b.S, b.max_blocks}, DType::kI32);
      const vt::Tensor sl = vt::Tensor::FromHost(b.lens.data(), {b.S}, DType::kI32);
      const vt::Tensor ql = vt::Tensor::FromHost(b.query_start_loc.data(), {b.S + 1}, DType::kI32);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      // The CPU: the prelude's definition, then the attention.
      const vt::Tensor kc_cpu = kc.To(vt::Device::Cpu()), vc_cpu = vc.To(vt::Device::Cpu());
      const vt::Tensor qo_cpu = vt::Tensor::Empty({b.S, Hq * D}, DType::kBF16);
      const vt::Tensor out_cpu = vt::Tensor::Empty({b.S, Hq * D}, DType::kBF16);
      vt::QkNormRopeCacheWrite(cpu, qo_cpu, q, k, v, &qn, &kn, 1e-6f, p, c, kc_cpu, vc_cpu, sm);
      vt::PagedAttention(cpu, out_cpu, qo_cpu, kc_cpu, vc_cpu, bt, sl, ql, scale);
      // The GPU, twice over the same inputs: early reads on, then off.
      const vt::Tensor kg = kc.To(vtt::kCuda), vg = vc.To(vtt::kCuda), qg = q.To(vtt::kCuda), kk = k.To(vtt::kCuda),
                       vv = v.To(vtt::kCuda), qng = qn.To(vtt::kCuda), kng = kn.To(vtt::kCuda), pg = p.To(vtt::kCuda),
                       cg = c.To(vtt::kCuda), smg = sm.To(vtt::kCuda), btg = bt.To(vtt::kCuda),
                       slg = sl.To(vtt::kCuda), qlg = ql.To(vtt::kCuda);
      const vt::Tensor qo = vt::Tensor::Empty({b.S, Hq * D}, DType::kBF16, vtt::kCuda);
      std::vector<uint8_t> outs[2];
      for (int off = 0; off < 2; ++off) {
        if (off) setenv("VT_CUDA_ATTN_EARLY_READS", "0", 1);
        const vt::Tensor out = vt::Tensor::Empty({b.S, Hq * D}, DType::kBF16, vtt::kCuda);
        const int64_t early0 = vt::cuda::DecodeMmaLaunchesReadingEarly(), wide0 = vt::cuda::DecodeMmaWideLaunches();
        vt::QkNormRopeCacheWrite(gpu, qo, qg, kk, vv, &qng, &kng, 1e-6f, pg, cg, kg, vg, smg);
        vt::PagedAttention(gpu, out, qo, kg, vg, btg, slg, qlg, scale);
        gpu.Synchronize();
        unsetenv("VT_CUDA_ATTN_EARLY_READS");
        EXPECT_EQ(vt::cuda::DecodeMmaLaunchesReadingEarly() - early0, off ? 0 : 1);
        EXPECT_EQ(vt::cuda::DecodeMmaWideLaunches() - wide0, std::string(wide) == "0" ? 0 : 1);
        outs[off] = vtt::Bytes(out);
        if (off) continue;
        EXPECT_TRUE(vtt::SameBytes(qo, qo_cpu)) << "the prelude's queries";
        EXPECT_TRUE(vtt::SameBytes(kg, kc_cpu)) << "the prelude's key cache";
        const std::vector<float> got = vtt::Floats(out), want = vtt::Floats(out_cpu);
        size_t bad = 0;
        double worst = 0;
        for (size_t e = 0; e < got.size(); ++e) {
          const double err = std::fabs(static_cast<double>(got[e]) - want[e]);
          if (!(err <= AttnTol(DType::kBF16, want[e], false))) ++bad;
          worst = std::max(worst, err);
        }
        EXPECT_EQ(bad, 0u) << "vs the CPU, worst " << worst;
      }
      EXPECT_EQ(outs[0], outs[1]) << "reading the context before the wait changed the output";
    }
  unsetenv("VT_CUDA_ATTN_DECODE_WIDE");
}

TEST(CudaModelOps, PagedAttentionRefusesBadMetadata) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  vt::Tensor kc = vt::Tensor::Empty({4, 16, 2, 32}, DType::kBF16, vtt::kCuda);
  vt::Tensor qt = vt::Tensor::Empty({2, 4 * 32}, DType::kBF16, vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty({2, 4 * 32}, DType::kBF16, vtt::kCuda);
  const std::vector<int32_t> qsl = {0, 2};
  auto expect_error = [&](const std::vector<int32_t>& table, int32_t len, const std::string& needle) {
    vt::Tensor bt = vt::Tensor::FromHost(table.data(), {1, static_cast<int64_t>(table.size())}, DType::kI32, vtt::kCuda);
    const std::vector<int32_t> lens = {len};
    try {
      vt::PagedAttention(gpu, out, qt, kc, kc, bt, IndexTensor(lens, DType::kI32, vtt::kCuda),
                         IndexTensor(qsl, DType::kI32, vtt::kCuda), 0.125f);
      gpu.Synchronize();
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const vt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({0, 4}, 20, "block_tables[0, 1] = 4");
  expect_error({0, 1}, 40, "seq_lens[0] = 40 exceeds");
  expect_error({0, 1}, 1, "has 2 new query rows but seq_lens[0] = 1");
}

// A bad index is reported once, at the first synchronization after the kernel that found
// it (including a copy to the host); then the queue keeps working and reports nothing.
TEST(CudaModelOps, IndexErrorIsReportedOnceAndTheQueueKeepsServing) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const std::vector<uint16_t> rows = {0x3F80, 0x4000, 0x4040, 0x4080};  // BF16 1, 2, 3, 4: table [4, 1]
  vt::Tensor table = vt::Tensor::FromHost(rows.data(), {4, 1}, DType::kBF16, vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty({2, 1}, DType::kBF16, vtt::kCuda);
  const std::vector<int32_t> bad = {1, 7}, good = {3, 0};
  vt::Embedding(gpu, out, table, IndexTensor(bad, DType::kI32, vtt::kCuda));
  std::vector<uint16_t> got(2);
  try {
    out.CopyToHost(got.data());
    ADD_FAILURE() << "id 7 of 4 rows accepted";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ids[1] = 7 is outside the table's 4 rows"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gpu.Synchronize());  // reported once
  vt::Embedding(gpu, out, table, IndexTensor(good, DType::kI32, vtt::kCuda));
  ASSERT_NO_THROW(out.CopyToHost(got.data()));
  EXPECT_EQ(got[0], 0x4080);
  EXPECT_EQ(got[1], 0x3F80);
}

}  // namespace
