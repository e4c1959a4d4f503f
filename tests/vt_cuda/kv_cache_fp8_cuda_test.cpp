// The FP8 KV cache on CUDA: KvCacheWrite's bytes equal the CPU's and the definition's
// reference (tests/vt/kv_fp8_ref.h) for ties, specials and every input dtype; the fused
// QkNormRopeCacheWrite kernel equals its composite byte for byte; PagedAttention over an
// F8E4M3 cache (16-byte and element-wise tile loads, split and unsplit contexts, prefill
// shapes that BF16 queries take to the tensor-core kernel) matches a float64 attention over
// the dequantized cache and the CPU kernel. Each test counts that the F8E4M3 kernels ran
// (vt::cuda::KvCacheFp8Launches), and the tensor-core prefill exactly where it applies.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "../vt/kv_fp8_ref.h"
#include "../vt/op_table.h"  // MakePagedBatch
#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"
#include "vt/ops/attention.h"

namespace {

using vt::DType;
using vt::Tensor;

TEST(CudaKvFp8, CacheWriteBytesEqualCpuAndReference) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  int launches = 0;
  for (float ks : {1.0f, 0.0371f, 3.7f}) {
    std::vector<float> x = vt_kvfp8::ProbeInputs(ks);
    const std::vector<float> more = vtt::Normal(1000, 9, 50.0f * ks);
    x.insert(x.end(), more.begin(), more.end());
    while (x.size() % 24 != 0) x.push_back(0.0f);
    const int64_t width = 24, T = static_cast<int64_t>(x.size()) / width;
    std::vector<int64_t> slots(static_cast<size_t>(T));
    std::iota(slots.rbegin(), slots.rend(), 0);  // reversed, and one padding row
    slots[1] = -1;
    const Tensor sm = Tensor::FromHost(slots.data(), {T}, DType::kI64);
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Tensor k = vtt::HostTensor(x, d, {T, width});
      const Tensor v = vtt::HostTensor(std::vector<float>(x.rbegin(), x.rend()), d, {T, width});
      Tensor kc = Tensor::Empty({T, 1, 2, width / 2}, DType::kF8E4M3), vc = kc.To(vt::Device::Cpu());
      std::vector<uint8_t> fill(kc.nbytes(), 0x5A);
      kc.CopyFrom(Tensor::FromHost(fill.data(), kc.shape(), DType::kF8E4M3));
      vc.CopyFrom(kc);
      Tensor kg = kc.To(vtt::kCuda), vg = vc.To(vtt::kCuda);
      const int64_t before = vt::cuda::KvCacheFp8Launches().cache_write;
      vt::KvCacheWrite(gpu, k.To(vtt::kCuda), v.To(vtt::kCuda), kg, vg, sm.To(vtt::kCuda), ks, 2 * ks);
      gpu.Synchronize();
      EXPECT_EQ(vt::cuda::KvCacheFp8Launches().cache_write, before + 1);
      ++launches;
      vt::KvCacheWrite(cpu, k, v, kc, vc, sm, ks, 2 * ks);
      EXPECT_TRUE(vtt::SameBytes(kg, kc)) << vt::DTypeName(d) << " scale " << ks;
      EXPECT_TRUE(vtt::SameBytes(vg, vc)) << vt::DTypeName(d) << " scale " << ks;
      const std::vector<uint8_t> kb = vtt::Bytes(kg), vb = vtt::Bytes(vg);
      int bad = 0;
      for (int64_t t = 0; t < T && bad < 5; ++t) {
        if (slots[t] < 0) continue;
        for (int64_t i = 0; i < width; ++i) {
          const int64_t e = slots[t] * width + i;
          if (kb[e] != vt_kvfp8::QuantRef(vt_test::ValueAt(k, t * width + i), ks) ||
              vb[e] != vt_kvfp8::QuantRef(vt_test::ValueAt(v, t * width + i), 2 * ks))
            ADD_FAILURE() << vt::DTypeName(d) << " token " << t << " element " << i << (++bad, "");
        }
      }
    }
  }
  EXPECT_EQ(launches, 9);
}

TEST(CudaKvFp8, FusedPreludeEqualsItsComposite) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const int64_t T = 6, Hq = 8, Hk = 2, D = 128, blocks = 4, bs = 4, max_pos = 64;
  std::vector<float> cs(static_cast<size_t>(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      cs[p * D + i] = static_cast<float>(std::cos(p * std::pow(1e6, -2.0 * i / D)));
      cs[p * D + D / 2 + i] = static_cast<float>(std::sin(p * std::pow(1e6, -2.0 * i / D)));
    }
  const std::vector<int64_t> pos = {0, 3, 63, 9, 9, 40}, slots = {15, -1, 0, 4, 9, 2};
  for (DType d : {DType::kBF16, DType::kF32, DType::kF16}) {
    const Tensor q = vtt::HostTensor(vtt::Normal(T * Hq * D, 1, 3.0f), d, {T, Hq * D}).To(vtt::kCuda);
    const Tensor k = vtt::HostTensor(vtt::Normal(T * Hk * D, 2, 3.0f), d, {T, Hk * D}).To(vtt::kCuda);
    const Tensor v = vtt::HostTensor(vtt::Normal(T * Hk * D, 3, 3.0f), d, {T, Hk * D}).To(vtt::kCuda);
    const Tensor qn = vtt::HostTensor(vtt::Normal(D, 4, 0.5f), DType::kF32, {D}).To(vtt::kCuda);
    const Tensor kn = vtt::HostTensor(vtt::Normal(D, 5, 0.5f), DType::kBF16, {D}).To(vtt::kCuda);
    const Tensor p = Tensor::FromHost(pos.data(), {T}, DType::kI64, vtt::kCuda);
    const Tensor c = Tensor::FromHost(cs.data(), {max_pos, D}, DType::kF32, vtt::kCuda);
    const Tensor sm = Tensor::FromHost(slots.data(), {T}, DType::kI64, vtt::kCuda);
    Tensor outs[2][3];
    for (int composite = 0; composite < 2; ++composite) {
      outs[composite][0] = Tensor::Empty({T, Hq * D}, d, vtt::kCuda);
      std::vector<uint8_t> fill(static_cast<size_t>(blocks * bs * Hk * D), 0x5A);
      outs[composite][1] = Tensor::FromHost(fill.data(), {blocks, bs, Hk, D}, DType::kF8E4M3, vtt::kCuda);
      outs[composite][2] = Tensor::FromHost(fill.data(), {blocks, bs, Hk, D}, DType::kF8E4M3, vtt::kCuda);
      const int64_t before = vt::cuda::KvCacheFp8Launches().qk_norm_rope;
      (composite ? vt::QkNormRopeCacheWriteComposite : vt::QkNormRopeCacheWrite)(
          gpu, outs[composite][0], q, k, v, &qn, &kn, 1e-6f, p, c, outs[composite][1], outs[composite][2], sm,
          0.0213f, 0.37f);
      gpu.Synchronize();
      EXPECT_EQ(vt::cuda::KvCacheFp8Launches().qk_norm_rope, before + (composite ? 0 : 1));
    }
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(vtt::SameBytes(outs[0][i], outs[1][i])) << vt::DTypeName(d) << " output " << i;
  }
}

struct Case {
  int64_t Hq, Hk, D, block_size;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // context, new rows
};

// Random F8E4M3 caches (keys / ks and values / vs quantized by the reference), the GPU's
// attention against float64 over the dequantized bytes and against the CPU kernel.
// decode_mma false: VT_CUDA_ATTN_DECODE_MMA_FP8=0 keeps BF16 queries' decode steps on the
// CUDA-core kernel.
void RunCase(const Case& c, DType d, uint32_t seed, float ks, float vs, bool decode_mma = true, float q_std = 1.5f) {
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  const vt_table::PagedBatch b = vt_table::MakePagedBatch(c.seqs, c.block_size, seed);
  const vt::Shape cshape{b.num_blocks, c.block_size, c.Hk, c.D};
  const size_t cn = static_cast<size_t>(b.num_blocks * c.block_size * c.Hk * c.D);
  auto cache = [&](uint32_t sd, float s) {
    const std::vector<float> x = vtt::Normal(cn, sd);
    std::vector<uint8_t> q(cn);
    for (size_t i = 0; i < cn; ++i) q[i] = vt_kvfp8::QuantRef(x[i], s);
    return q;
  };
  const std::vector<uint8_t> kb = cache(seed + 1, ks), vb = cache(seed + 2, vs);
  const Tensor kc = Tensor::FromHost(kb.data(), cshape, DType::kF8E4M3);
  const Tensor vc = Tensor::FromHost(vb.data(), cshape, DType::kF8E4M3);
  const Tensor qh = vtt::HostTensor(vtt::Normal(static_cast<size_t>(b.T * c.Hq * c.D), seed + 3, q_std), d, {b.T, c.Hq * c.D});
  const Tensor bt = Tensor::FromHost(b.tables.data(), {b.S, b.max_blocks}, DType::kI32);
  const Tensor sl = Tensor::FromHost(b.lens.data(), {b.S}, DType::kI32);
  const Tensor ql = Tensor::FromHost(b.query_start_loc.data(), {b.S + 1}, DType::kI32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  Tensor out = Tensor::Empty({b.T, c.Hq * c.D}, d), out_gpu = Tensor::Empty({b.T, c.Hq * c.D}, d, vtt::kCuda);
  vt::PagedAttention(cpu, out, qh, kc, vc, bt, sl, ql, scale, ks, vs);
  const int64_t fp8_before = vt::cuda::KvCacheFp8Launches().attention, mma_before = vt::cuda::PrefillMmaLaunches();
  const int64_t dec_before = vt::cuda::DecodeAttentionLaunches(), dec_mma_before = vt::cuda::DecodeMmaLaunches();
  const int64_t dec_fp8_before = vt::cuda::DecodeMmaFp8Launches(), heads_n_before = vt::cuda::DecodeMmaHeadsNLaunches();
  const int64_t wide_before = vt::cuda::DecodeMmaWideLaunches();
  if (!decode_mma) setenv("VT_CUDA_ATTN_DECODE_MMA_FP8", "0", 1);
  vt::PagedAttention(gpu, out_gpu, qh.To(vtt::kCuda), kc.To(vtt::kCuda), vc.To(vtt::kCuda), bt.To(vtt::kCuda),
                     sl.To(vtt::kCuda), ql.To(vtt::kCuda), scale, ks, vs);
  gpu.Synchronize();
  unsetenv("VT_CUDA_ATTN_DECODE_MMA_FP8");
  EXPECT_EQ(vt::cuda::KvCacheFp8Launches().attention, fp8_before + 1);
  // The tensor-core prefill kernel takes BF16 queries over many rows per sequence, or the
  // prompt rows of a mixed step; a decode kernel one row per sequence from 8 sequences
  // (BF16 queries with the tensor-core kernel on: at any batch), or a mixed step's one-row
  // sequences: the tensor-core one for BF16 queries (unless switched off), the CUDA-core one
  // for F16.
  // (Head size 256 takes the prefill kernel on sm_90, the devices these tests run on, and no
  // decode kernel.)
  const bool geom = (c.D == 64 || c.D == 128) && c.Hq / c.Hk <= 8;
  const bool prefill_geom = c.D == 64 || c.D == 128 || c.D == 256;
  const bool mixed = d == DType::kBF16 && geom && b.T != b.S && b.T < 64 * b.S && b.S >= 8;
  const bool mma = d == DType::kBF16 && ((prefill_geom && b.T >= 64 * b.S) || mixed);
  // (A decode step of BF16 queries takes the tensor-core kernel at any batch.)
  const bool dec = d != DType::kF32 && geom &&
                   ((b.S >= 8 && (b.T == b.S || mixed)) || (b.T == b.S && d == DType::kBF16 && decode_mma));
  EXPECT_EQ(vt::cuda::PrefillMmaLaunches() - mma_before, mma ? 1 : 0) << vt::DTypeName(d) << " D " << c.D;
  EXPECT_EQ(vt::cuda::DecodeAttentionLaunches() - dec_before, dec ? 1 : 0) << vt::DTypeName(d) << " D " << c.D;
  const int64_t dec_mma = dec && d == DType::kBF16 && decode_mma ? 1 : 0;
  EXPECT_EQ(vt::cuda::DecodeMmaLaunches() - dec_mma_before, dec_mma) << vt::DTypeName(d) << " D " << c.D;
  EXPECT_EQ(vt::cuda::DecodeMmaFp8Launches() - dec_fp8_before, dec_mma) << vt::DTypeName(d) << " D " << c.D;
  // The wide form (few sequence-KV-head pairs; never with VT_CUDA_ATTN_DECODE_HEADS_N=1) runs
  // the query heads as rows; the four-warp form as columns unless the switch says rows.
  const int64_t wide = vt::cuda::DecodeMmaWideLaunches() - wide_before;
  const char* heads_n = std::getenv("VT_CUDA_ATTN_DECODE_HEADS_N");
  if (heads_n != nullptr && std::string(heads_n) != "0") {
    EXPECT_EQ(wide, 0);
  }
  if (b.S * c.Hk * 4 <= 32) {  // few pairs for any GPU these tests run on
    EXPECT_EQ(wide, heads_n != nullptr && std::string(heads_n) != "0" ? 0 : dec_mma) << "S " << b.S;
  }
  EXPECT_LE(wide, dec_mma);
  EXPECT_EQ(vt::cuda::DecodeMmaHeadsNLaunches() - heads_n_before, vtt::DecodeHeadsNOn(true) ? dec_mma - wide : 0);
  const std::vector<float> got = vtt::Floats(out_gpu), on_cpu = vtt::Floats(out), q = vtt::Floats(qh);
  const int mant = d == DType::kF32 ? 23 : d == DType::kBF16 ? 7 : 10;
  auto tol = [&](double ref, double extra) {
    return 2.0 * std::exp2(std::floor(std::log2(std::max(std::fabs(ref), 0x1p-14))) - mant) + extra;
  };
  // DequantRef of every code, for either cache's scale.
  double kd[256], vd[256];
  for (int code = 0; code < 256; ++code) {
    kd[code] = vt_kvfp8::DequantRef(static_cast<uint8_t>(code), ks);
    vd[code] = vt_kvfp8::DequantRef(static_cast<uint8_t>(code), vs);
  }
  size_t bad = 0;
  for (int64_t s = 0; s < b.S; ++s) {
    const auto [ctx, n] = c.seqs[s];
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = b.query_start_loc[s] + r, pos = ctx - n + r;
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t kh = h / (c.Hq / c.Hk);
        // Where token j's row of this KV head starts in either cache.
        auto row = [&](int64_t j) {
          return static_cast<size_t>(
              ((b.tables[s * b.max_blocks + j / c.block_size] * c.block_size + j % c.block_size) * c.Hk + kh) * c.D);
        };
        std::vector<double> sc(static_cast<size_t>(pos + 1));
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          const size_t kr = row(j);
          for (int64_t i = 0; i < c.D; ++i) dot += double(q[(t * c.Hq + h) * c.D + i]) * kd[kb[kr + i]];
          sc[j] = dot * scale;
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - m));
        // Each output sums its terms in token order; the tokens walk the cache rows once.
        std::vector<double> acc(static_cast<size_t>(c.D), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          const size_t vr = row(j);
          for (int64_t i = 0; i < c.D; ++i) acc[i] += sc[j] * vd[vb[vr + i]];
        }
        for (int64_t i = 0; i < c.D; ++i) {
          const double ref = acc[i] / z;
          const size_t e = static_cast<size_t>((t * c.Hq + h) * c.D + i);
          if (!(std::fabs(got[e] - ref) <= tol(ref, 2e-5)) || !(std::fabs(got[e] - on_cpu[e]) <= tol(on_cpu[e], 1e-5)))
            if (++bad <= 3)
              ADD_FAILURE() << vt::DTypeName(d) << " D " << c.D << " seq " << s << " row " << r << " head " << h
                            << " dim " << i << ": gpu " << got[e] << " cpu " << on_cpu[e] << " ref " << ref;
        }
      }
    }
  }
}

TEST(CudaKvFp8, PagedAttentionMatchesReferenceAndCpu) {
  VT_REQUIRE_CUDA();
  std::vector<Case> cases = {
      {4, 2, 32, 16, {{5, 5}, {40, 40}, {70, 9}}},              // prefill chunks, 16-byte loads
      {8, 2, 128, 16, {{300, 300}, {200, 130}}},                 // BF16 queries: the tensor-core kernel
      {8, 8, 64, 16, {{600, 600}}},                              // the same, D = 64, 10 tiles
      {16, 2, 256, 16, {{300, 300}, {150, 70}}},                 // the same, D = 256 (Q in shared memory)
      {8, 1, 64, 16, {{2100, 1}, {700, 1}, {1, 1}}},             // decode, contexts split across CTAs
      {32, 8, 128, 16, {{4096, 1}, {513, 1}}},                   // GQA 4 at 4k context
      {4, 4, 8, 4, {{9, 1}, {17, 17}}},                          // D = 8: element-wise loads
      {12, 4, 40, 16, {{33, 33}, {100, 1}}},                     // D = 40: rows not a multiple of 16 bytes
      // a decode step of 9 sequences (the decode kernels), contexts 1..1000, GQA 4 and 8
      {16, 4, 128, 16, {{1, 1}, {63, 1}, {64, 1}, {65, 1}, {200, 1}, {1000, 1}, {7, 1}, {129, 1}, {300, 1}}},
      {16, 2, 64, 16, {{5, 1}, {90, 1}, {700, 1}, {33, 1}, {64, 1}, {128, 1}, {1, 1}, {250, 1}, {17, 1}}},
      // Qwen3-8B's heads (GQA 4, D = 128) at 8 sequences up to 4k: split contexts
      {32, 8, 128, 16, {{4096, 1}, {3000, 1}, {1, 1}, {257, 1}, {2048, 1}, {77, 1}, {4095, 1}, {640, 1}}},
      // GQA 1, D = 64, block size 32
      {4, 4, 64, 32, {{100, 1}, {1, 1}, {31, 1}, {32, 1}, {33, 1}, {500, 1}, {64, 1}, {65, 1}}},
  };
  // A mixed step: 100 decode rows over contexts of 1..400 beside three prompt chunks.
  Case mixed{32, 8, 128, 16, {{300, 100}, {40, 40}, {70, 2}}};
  for (int64_t i = 0; i < 97; ++i) mixed.seqs.push_back({1 + (i * 53) % 400, 1});
  cases.push_back(mixed);
  uint32_t seed = 300;
  for (const Case& c : cases) {
    for (DType d : {DType::kBF16, DType::kF32, DType::kF16}) RunCase(c, d, seed += 7, 0.011f, 0.0625f);
    RunCase(c, DType::kBF16, seed += 7, 0.011f, 0.0625f, false);  // BF16 decode on the CUDA-core kernel
  }
  // Queries past F16's range (4e4 standard deviation: a tenth of them over 65504): the
  // tensor-core decode kernel brings them to [0.5, 1) before widening them to F16.
  RunCase({16, 4, 128, 16, {{300, 1}, {5, 1}, {64, 1}, {1000, 1}, {2, 1}, {129, 1}, {700, 1}, {31, 1}}}, DType::kBF16,
          seed += 7, 0.011f, 0.0625f, true, 4.0e4f);
}

}  // namespace
