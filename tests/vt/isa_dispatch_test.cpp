// Which kernels each CPU ISA level really runs, from the dispatch records the CPU backend keeps
// (elementwise::LastElementwiseSetOnThisThread, matmul::LastGemmOnThisThread,
// attention::LastAttentionOnThisThread): without this
// a level could silently run the scalar reference (or another level's code) and the
// op table's byte comparisons would still pass. On x86-64 for the x86 levels, on aarch64
// (under qemu in CI, once per CPU model) for the ARM levels.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "elementwise_test_util.h"
#include "vt/cpu/attention_kernels.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/vt.h"

// From vt/cpu/elementwise_kernels.h, whose inline ForIsa depends on the library's own
// compile definitions (VT_CPU_X86 / VT_CPU_ARM), so a test must not include it.
namespace vt::cpu::elementwise {
const char* LastElementwiseSetOnThisThread();
}

namespace {

namespace ew = vt::cpu::elementwise;
namespace at = vt::cpu::attention;
namespace mm = vt::cpu::matmul;
using vt::CpuIsa;
using vt::DType;

// The elementwise set each level must choose.
std::string ElementwiseSetOf(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAmx: return "avx512";
    case CpuIsa::kNeon:
    case CpuIsa::kNeonBf16: return "neon";
    default: return "?";
  }
}

vt::Tensor Random(const vt::Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return vt_test::MakeTensor(v, shape, dtype);
}

std::vector<uint8_t> RandomFp8(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (uint8_t& c : v) {
    c = static_cast<uint8_t>(rng());
    if ((c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
  }
  return v;
}

// Every level of this processor up to the one qemu's CPU model must give (scripts/build_aarch64.sh
// sets VTLLM_EXPECT_CPU_ISA per model): each op family records the set the level chose. After
// each op a Cast on a scalar queue sets the record to "scalar", so an op that records nothing
// itself cannot pass on the record of the op before it.
TEST(IsaDispatch, EachLevelRunsItsElementwiseKernels) {
  const std::vector<CpuIsa> levels = vt_test::IsaLevels();
  if (const char* want = std::getenv("VTLLM_EXPECT_CPU_ISA"); want != nullptr && *want != '\0') {
    ASSERT_STREQ(vt::CpuIsaName(levels.back()), want) << "the highest level this processor runs";
  }
  const int64_t rows = 3, H = 77;
  const vt::Tensor x = Random({rows, H}, DType::kBF16, 1), w = Random({H}, DType::kBF16, 2);
  const vt::Tensor gate = Random({rows, H}, DType::kBF16, 3), x2 = Random({rows, 2 * H}, DType::kBF16, 4);
  const vt::Tensor xf = Random({rows, H}, DType::kF32, 5);
  // RotaryEmbedding: 2 heads of 20 per token (10 pairs: whole vectors and a partial one).
  const int64_t D = 20;
  const std::vector<int32_t> positions = {0, 5, 2};
  const vt::Tensor pos = vt::Tensor::FromHost(positions.data(), {rows}, DType::kI32);
  const vt::Tensor cos_sin = Random({8, D}, DType::kF32, 6);
  const vt::Queue scalar = vt_test::QueueFor(CpuIsa::kScalar);
  const vt::Tensor reset_out = vt::Tensor::Empty({1, H}, DType::kF32);
  int checked = 0;
  for (CpuIsa isa : levels) {
    const vt::Queue q = vt_test::QueueFor(isa);
    const std::string want = ElementwiseSetOf(isa);
    SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa)));
    auto expect_ran = [&](const char* op) {
      const char* got = ew::LastElementwiseSetOnThisThread();
      ASSERT_NE(got, nullptr) << op;
      EXPECT_EQ(std::string(got), want) << op;
      ++checked;
      vt::Cast(scalar, reset_out, Random({1, H}, DType::kBF16, 8));
      ASSERT_STREQ(ew::LastElementwiseSetOnThisThread(), "scalar");
    };
    const vt::Tensor fp8 = vt::Tensor::Empty({rows, H}, DType::kF8E4M3);
    const vt::Tensor bf16 = vt::Tensor::Empty({rows, H}, DType::kBF16);
    vt::QuantFp8Static(q, fp8, xf, 0.03f);
    expect_ran("QuantFp8Static");
    vt::Cast(q, bf16, xf);
    expect_ran("Cast");
    vt::RmsNorm(q, bf16, x, w, 1e-6f);
    expect_ran("RmsNorm");
    vt::RmsNormGated(q, bf16, x, gate, w, 1e-6f);
    expect_ran("RmsNormGated");
    vt::RmsNormZeroCentred(q, bf16, x, w, 1e-6f);
    expect_ran("RmsNormZeroCentred");
    vt::SiluMul(q, bf16, x2);
    expect_ran("SiluMul");
    vt::RmsNormQuantFp8(q, fp8, x, w, 1e-6f, 0.05f);
    expect_ran("RmsNormQuantFp8");
    vt::RmsNormZeroCentredQuantFp8(q, fp8, x, w, 1e-6f, 0.05f);
    expect_ran("RmsNormZeroCentredQuantFp8");
    vt::RmsNormGatedQuantFp8(q, fp8, x, gate, w, 1e-6f, 0.05f);
    expect_ran("RmsNormGatedQuantFp8");
    vt::SiluMulQuantFp8(q, fp8, x2, 0.05f);
    expect_ran("SiluMulQuantFp8");
    // The per-token-group recipes: groups of 32 (three groups, the last partial) per row.
    const vt::Tensor scales = vt::Tensor::Empty({rows, 3}, DType::kF32);
    vt::RmsNormQuantFp8PerTokenGroup(q, fp8, scales, x, w, 1e-6f, 32, vt::kFp8BlockAmaxFloor, 0.0f);
    expect_ran("RmsNormQuantFp8PerTokenGroup");
    vt::RmsNormZeroCentredQuantFp8PerTokenGroup(q, fp8, scales, x, w, 1e-6f, 32, vt::kFp8BlockAmaxFloor, 0.0f);
    expect_ran("RmsNormZeroCentredQuantFp8PerTokenGroup");
    vt::RmsNormGatedQuantFp8PerTokenGroup(q, fp8, scales, x, gate, w, 1e-6f, 32, vt::kFp8BlockAmaxFloor, 0.0f);
    expect_ran("RmsNormGatedQuantFp8PerTokenGroup");
    vt::SiluMulQuantFp8PerTokenGroup(q, fp8, scales, x2, 32, vt::kFp8BlockAmaxFloor, 0.0f);
    expect_ran("SiluMulQuantFp8PerTokenGroup");
    const vt::Tensor query = Random({rows, 2 * D}, DType::kBF16, 7);
    vt::RotaryEmbedding(q, pos, query, nullptr, cos_sin, D);
    expect_ran("RotaryEmbedding");
  }
  EXPECT_EQ(checked, 15 * static_cast<int>(levels.size()));
  std::cout << "[ elementwise kernels per level ]";
  for (CpuIsa isa : levels) std::cout << " " << vt::CpuIsaName(isa) << "=" << ElementwiseSetOf(isa);
  std::cout << "\n";
}

// Matmul with BF16 and F32 operands: the BF16 pairs sets take BF16 x BF16 only (F32 is not
// exact in BF16), and small M streams.
TEST(IsaDispatch, EachLevelRunsItsMatmulKernels) {
  const std::map<CpuIsa, std::pair<std::string, std::string>> sets = {
      {CpuIsa::kScalar, {"scalar-f32", "scalar-f32"}},
      {CpuIsa::kAvx2, {"avx2-f32", "avx2-f32"}},
      {CpuIsa::kAvx512, {"avx512-f32", "avx512-f32"}},
      {CpuIsa::kAvx512Bf16, {"avx512bf16-dpbf16", "avx512-f32"}},
      {CpuIsa::kAmx, {"amx-bf16", "avx512-f32"}},
      {CpuIsa::kNeon, {"neon-f32", "neon-f32"}},
      {CpuIsa::kNeonBf16, {"neonbf16-bfmmla", "neon-f32"}},
  };
  const int64_t N = 24, K = 96;
  const vt::Tensor b16 = Random({N, K}, DType::kBF16, 7), b32 = Random({N, K}, DType::kF32, 8);
  int checked = 0;
  for (CpuIsa isa : vt_test::IsaLevels()) {
#if defined(__x86_64__)
    // Without AVX512-VBMI the BF16 pairs sets step aside for the F32 one.
    if (isa >= CpuIsa::kAvx512Bf16 && !__builtin_cpu_supports("avx512vbmi")) continue;
#endif
    const vt::Queue q = vt_test::QueueFor(isa);
    for (int64_t M : {1, 40}) {
      SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa), " M=", M));
      auto out = vt::Tensor::Empty({M, N}, DType::kF32);
      vt::Matmul(q, out, Random({M, K}, DType::kBF16, 9), b16);
      mm::LastGemm last = mm::LastGemmOnThisThread();
      ASSERT_NE(last.set, nullptr);
      EXPECT_EQ(std::string(last.set), sets.at(isa).first);
      if (isa != CpuIsa::kAmx) {
        EXPECT_EQ(last.stream, isa != CpuIsa::kScalar && M <= 4);
      }
      vt::Matmul(q, out, Random({M, K}, DType::kF32, 10), b32);
      last = mm::LastGemmOnThisThread();
      ASSERT_NE(last.set, nullptr);
      EXPECT_EQ(std::string(last.set), sets.at(isa).second);
      checked += 2;
    }
  }
  EXPECT_GT(checked, 0);
}

// MatmulFp8 at decode (M = 1, the streaming GEMV) and prefill (the packed-panel GEMM) on each
// level, with the set and path recorded.
TEST(IsaDispatch, EachLevelRunsItsFp8GemvAndGemm) {
  const int64_t N = 36, K = 200;
  const auto bw = RandomFp8(N * K, 11);
  const vt::Tensor b = vt::Tensor::FromHost(bw.data(), {N, K}, DType::kF8E4M3);
  int checked = 0;
  for (CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    for (int64_t M : {1, 3, 33}) {
      SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa), " M=", M));
      const auto aw = RandomFp8(M * K, 12);
      auto out = vt::Tensor::Empty({M, N}, DType::kBF16);
      vt::MatmulFp8(q, out, vt::Tensor::FromHost(aw.data(), {M, K}, DType::kF8E4M3), b, 0.25f);
      const mm::LastGemm last = mm::LastGemmOnThisThread();
      ASSERT_NE(last.set, nullptr);
      if (isa == CpuIsa::kNeon) {
        EXPECT_STREQ(last.set, "neon-f32");
      }
      if (isa == CpuIsa::kNeonBf16) {
        EXPECT_STREQ(last.set, "neonbf16-bfmmla");
      }
      if (isa == CpuIsa::kScalar) {
        EXPECT_STREQ(last.set, "scalar-f32");
      }
      if (isa == CpuIsa::kNeon || isa == CpuIsa::kNeonBf16) {
        EXPECT_EQ(last.stream, M <= 4);
        EXPECT_FALSE(last.packed);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * static_cast<int>(vt_test::IsaLevels().size()));
}

// PagedAttention on each level, D = 64 (a multiple of every set's lanes): a decode step (two
// sequences of one row, BF16 and F8E4M3 caches), a prefill chunk (20 new rows over 50
// tokens) through the tile kernel and, with SetPrefillTiles(false), through the one-query
// kernel. The record names the set of the level and counts the calls of the path's kernel,
// made where the kernel is called; the portable loops count blocks instead. Before each
// level's call the same call on a scalar queue must record "scalar" and portable blocks only,
// so a call that records nothing cannot pass on its predecessor's record.
TEST(IsaDispatch, EachLevelRunsItsAttentionKernels) {
  const int64_t Hq = 4, Hk = 2, D = 64, bs = 16, num_blocks = 10, max_blocks = 5;
  const vt::Tensor kc16 = Random({num_blocks, bs, Hk, D}, DType::kBF16, 21);
  const vt::Tensor vc16 = Random({num_blocks, bs, Hk, D}, DType::kBF16, 22);
  const auto k8 = RandomFp8(num_blocks * bs * Hk * D, 23), v8 = RandomFp8(num_blocks * bs * Hk * D, 24);
  const vt::Tensor kc8 = vt::Tensor::FromHost(k8.data(), {num_blocks, bs, Hk, D}, DType::kF8E4M3);
  const vt::Tensor vc8 = vt::Tensor::FromHost(v8.data(), {num_blocks, bs, Hk, D}, DType::kF8E4M3);
  struct Case {
    const char* name;
    std::vector<int32_t> lens, starts, tables;  // tables: [S, max_blocks]
    bool fp8_cache, tiles;
  };
  // Decode: contexts of 40 and 70 tokens, 3 + 5 blocks, so 8 * Hk attend_rows calls.
  const std::vector<int32_t> decode_tables = {7, 2, 9, 0, 0, 1, 4, 6, 3, 8};
  const std::vector<Case> cases = {
      {"decode bf16 cache", {40, 70}, {0, 1, 2}, decode_tables, false, true},
      {"decode fp8 cache", {40, 70}, {0, 1, 2}, decode_tables, true, true},
      {"prefill tiles", {50}, {0, 20}, {5, 1, 8, 3, 0}, false, true},
      {"prefill one-query kernel", {50}, {0, 20}, {5, 1, 8, 3, 0}, false, false},
  };
  int checked = 0;
  for (CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    const vt::Queue scalar = vt_test::QueueFor(CpuIsa::kScalar);
    const std::string want = ElementwiseSetOf(isa);  // the attention sets share the names
    for (const Case& c : cases) {
      SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa), " ", c.name));
      const int64_t S = static_cast<int64_t>(c.lens.size()), T = c.starts.back();
      const vt::Tensor query = Random({T, Hq * D}, DType::kBF16, 25);
      const vt::Tensor out = vt::Tensor::Empty({T, Hq * D}, DType::kBF16);
      const vt::Tensor lens = vt::Tensor::FromHost(c.lens.data(), {S}, DType::kI32);
      const vt::Tensor starts = vt::Tensor::FromHost(c.starts.data(), {S + 1}, DType::kI32);
      const vt::Tensor tables = vt::Tensor::FromHost(c.tables.data(), {S, max_blocks}, DType::kI32);
      const vt::Tensor& kc = c.fp8_cache ? kc8 : kc16;
      const vt::Tensor& vc = c.fp8_cache ? vc8 : vc16;
      const float k_scale = c.fp8_cache ? 0.02f : 1.0f, v_scale = c.fp8_cache ? 0.03f : 1.0f;
      at::SetPrefillTiles(c.tiles);
      vt::PagedAttention(scalar, out, query, kc, vc, tables, lens, starts, 0.125f, k_scale, v_scale);
      at::LastAttention last = at::LastAttentionOnThisThread();
      ASSERT_NE(last.set, nullptr);
      EXPECT_STREQ(last.set, "scalar");
      EXPECT_GT(last.portable_blocks, 0);
      EXPECT_EQ(last.rows_calls + last.tile_calls + last.block_calls, 0);
      vt::PagedAttention(q, out, query, kc, vc, tables, lens, starts, 0.125f, k_scale, v_scale);
      last = at::LastAttentionOnThisThread();
      at::SetPrefillTiles(true);
      ASSERT_NE(last.set, nullptr);
      EXPECT_EQ(std::string(last.set), want);
      if (isa == CpuIsa::kScalar) {
        EXPECT_GT(last.portable_blocks, 0);
        EXPECT_EQ(last.rows_calls + last.tile_calls + last.block_calls, 0);
      } else if (S == 2) {
        EXPECT_EQ(last.rows_calls, 8 * Hk);
        EXPECT_EQ(last.tile_calls + last.block_calls + last.portable_blocks, 0);
      } else if (c.tiles) {
        EXPECT_GT(last.tile_calls, 0);
        EXPECT_EQ(last.rows_calls + last.block_calls + last.portable_blocks, 0);
      } else {
        EXPECT_GT(last.block_calls, 0);
        EXPECT_EQ(last.rows_calls + last.tile_calls + last.portable_blocks, 0);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * static_cast<int>(vt_test::IsaLevels().size()));
  std::cout << "[ attention kernels per level ]";
  for (CpuIsa isa : vt_test::IsaLevels()) std::cout << " " << vt::CpuIsaName(isa) << "=" << ElementwiseSetOf(isa);
  std::cout << "\n";
}

}  // namespace
