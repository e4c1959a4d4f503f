// Output bytes of the norms, SiluMul and the fused norm/activation -> FP8 recipes pinned by
// hashes committed here, so that every CPU ISA level of every architecture (x86's scalar,
// avx2, avx512, avx512bf16, amx; aarch64's scalar, neon, neonbf16 under qemu in CI) must give
// the same bytes as the x86 scalar kernels. The op table compares each level with the scalar
// kernels of the same build only; this ties an aarch64 build's bytes to an x86 build's.
//
// Inputs come from an integer hash (SplitMix64), turned into floats that are exact in BF16
// (at most 8 significant bits), so no standard library's distributions or rounding enter.
// The hash of a case is FNV-1a (64-bit) over its output bytes in order (the op's outputs,
// then any residual it updated in place).
//
// How the constants were made: with VTLLM_ISA_BYTES_PRINT=1 the test checks nothing and
// prints each case's hash on the scalar level as a row of kWant; the rows below are that
// output of build/rel/tests/vt_tests (x86-64, Release, GCC 12, -DVT_CUDA=OFF). The test
// then passed on every x86 level of that machine (scalar, avx2, avx512, avx512bf16, amx)
// and, under qemu-aarch64 -cpu max (scalar, neon, neonbf16), neoverse-n1 and cortex-a53
// (scalar, neon), on every ARM level (scripts/build_aarch64.sh --ci).
//
// Every op here is byte-exact across backends and ISA levels by contract (the header of
// op_table_elementwise.cpp and vt/cpu/elementwise_kernels.h): the recipes fix their
// arithmetic order and the vector norms and SiluMul reproduce the scalar order; the build
// compiles with -ffp-contract=off and SiluMul's exponential is vt's own (numerics::Exp),
// not the C library's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "elementwise_test_util.h"
#include "vt/vt.h"

namespace {

using vt::CpuIsa;
using vt::DType;
using vt::Tensor;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element i of stream `seed`: an 8-bit signed integer times 2^-5 (|v| < 4), plus offset;
// exact in BF16, F16 and F32.
float Value(uint32_t seed, int64_t i, float offset = 0.0f) {
  const uint64_t h = SplitMix64((static_cast<uint64_t>(seed) << 32) ^ static_cast<uint64_t>(i));
  const int v = static_cast<int>(h >> 56) - 128;
  return static_cast<float>(v) * 0.03125f + offset;
}

Tensor Fill(const vt::Shape& shape, DType dtype, uint32_t seed, float offset = 0.0f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = Value(seed, i, offset);
  return vt_test::MakeTensor(v, shape, dtype);
}

uint64_t Fnv1a(const std::vector<uint8_t>& bytes, uint64_t h = 0xCBF29CE484222325ull) {
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001B3ull;
  }
  return h;
}

struct Case {
  std::string name;
  // Runs the op on q from fresh inputs; returns its output tensors in hashing order.
  std::function<std::vector<Tensor>(const vt::Queue& q)> run;
};

// Rows of 77 (a vector tail on every level) and 512 elements.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  const float eps = 1e-6f, scale = 0.02f;  // most outputs / 0.02 within fp8's 448, the largest saturate
  for (int64_t H : {77, 512}) {
    const int64_t rows = 6;
    auto name = [H](const char* op) { return vt::StrCat(op, " H=", H); };
    auto add = [&](const std::string& n, std::function<std::vector<Tensor>(const vt::Queue&)> f) {
      cases.push_back({n, std::move(f)});
    };
    add(name("RmsNorm bf16"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kBF16);
      vt::RmsNorm(q, out, Fill({rows, H}, DType::kBF16, 1), Fill({H}, DType::kBF16, 2, 1.0f), eps);
      return std::vector<Tensor>{out};
    });
    add(name("RmsNorm bf16 residual"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kBF16), res = Fill({rows, H}, DType::kBF16, 3);
      vt::RmsNorm(q, out, Fill({rows, H}, DType::kBF16, 1), Fill({H}, DType::kBF16, 2, 1.0f), eps, &res);
      return std::vector<Tensor>{out, res};
    });
    add(name("RmsNorm f32"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF32);
      vt::RmsNorm(q, out, Fill({rows, H}, DType::kF32, 4), Fill({H}, DType::kF32, 5, 1.0f), eps);
      return std::vector<Tensor>{out};
    });
    add(name("RmsNormQuantFp8"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF8E4M3);
      vt::RmsNormQuantFp8(q, out, Fill({rows, H}, DType::kBF16, 6), Fill({H}, DType::kBF16, 7, 1.0f), eps, scale);
      return std::vector<Tensor>{out};
    });
    add(name("RmsNormQuantFp8 residual"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF8E4M3), normed = Tensor::Empty({rows, H}, DType::kBF16);
      Tensor res = Fill({rows, H}, DType::kBF16, 8);
      vt::RmsNormQuantFp8(q, out, Fill({rows, H}, DType::kBF16, 6), Fill({H}, DType::kBF16, 7, 1.0f), eps, scale,
                          &res, &normed);
      return std::vector<Tensor>{out, normed, res};
    });
    add(name("RmsNormZeroCentredQuantFp8"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF8E4M3);
      vt::RmsNormZeroCentredQuantFp8(q, out, Fill({rows, H}, DType::kBF16, 9), Fill({H}, DType::kBF16, 10), eps,
                                     scale);
      return std::vector<Tensor>{out};
    });
    add(name("RmsNormZeroCentredQuantFp8 residual"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF8E4M3), normed = Tensor::Empty({rows, H}, DType::kBF16);
      Tensor res = Fill({rows, H}, DType::kBF16, 11);
      vt::RmsNormZeroCentredQuantFp8(q, out, Fill({rows, H}, DType::kBF16, 9), Fill({H}, DType::kBF16, 10), eps,
                                     scale, &res, &normed);
      return std::vector<Tensor>{out, normed, res};
    });
    add(name("SiluMul bf16"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kBF16);
      vt::SiluMul(q, out, Fill({rows, 2 * H}, DType::kBF16, 12));
      return std::vector<Tensor>{out};
    });
    add(name("SiluMul f32"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF32);
      vt::SiluMul(q, out, Fill({rows, 2 * H}, DType::kF32, 13));
      return std::vector<Tensor>{out};
    });
    add(name("SiluMulQuantFp8"), [=](const vt::Queue& q) {
      Tensor out = Tensor::Empty({rows, H}, DType::kF8E4M3);
      vt::SiluMulQuantFp8(q, out, Fill({rows, 2 * H}, DType::kBF16, 14), scale);
      return std::vector<Tensor>{out};
    });
  }
  return cases;
}

// The committed hashes, in the order of Cases().
const std::vector<uint64_t> kWant = {
    0x9ce7fdd9aaa7a2ebull,  // RmsNorm bf16 H=77
    0x21d2dd7323f0a827ull,  // RmsNorm bf16 residual H=77
    0x4ac530e7d9eef45dull,  // RmsNorm f32 H=77
    0x6492e038fc992de2ull,  // RmsNormQuantFp8 H=77
    0x88b612e900e2960cull,  // RmsNormQuantFp8 residual H=77
    0xd890dba98a0fc486ull,  // RmsNormZeroCentredQuantFp8 H=77
    0x2fd0779a2825eb51ull,  // RmsNormZeroCentredQuantFp8 residual H=77
    0x8ac9f635f5016209ull,  // SiluMul bf16 H=77
    0xee59f7c7ee07274cull,  // SiluMul f32 H=77
    0xde5b3cf6f673fdceull,  // SiluMulQuantFp8 H=77
    0x38270f2b0664de77ull,  // RmsNorm bf16 H=512
    0x7fe5f07eca3b6993ull,  // RmsNorm bf16 residual H=512
    0x4b5adb1a66117611ull,  // RmsNorm f32 H=512
    0x4e5136af1e76942cull,  // RmsNormQuantFp8 H=512
    0x8ce5fee54be83707ull,  // RmsNormQuantFp8 residual H=512
    0xc04fab1317aeb1adull,  // RmsNormZeroCentredQuantFp8 H=512
    0x05ec29d5d0fc0b85ull,  // RmsNormZeroCentredQuantFp8 residual H=512
    0xad07b33bc5774998ull,  // SiluMul bf16 H=512
    0x160c433d91b526c5ull,  // SiluMul f32 H=512
    0x900d5c9fd845b46eull,  // SiluMulQuantFp8 H=512
};

TEST(IsaBytes, NormsActivationsAndFp8RecipesMatchTheX86ScalarBytes) {
  std::vector<Case> cases = Cases();
  const bool print = std::getenv("VTLLM_ISA_BYTES_PRINT") != nullptr;
  if (!print) {
    ASSERT_EQ(kWant.size(), cases.size());
  }
  int checked = 0;
  for (CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    for (size_t c = 0; c < cases.size(); ++c) {
      uint64_t h = 0xCBF29CE484222325ull;
      for (const Tensor& t : cases[c].run(q)) h = Fnv1a(vt_test::BytesOf(t), h);
      if (print) {
        if (isa == CpuIsa::kScalar) std::printf("    0x%016llxull,  // %s\n", static_cast<unsigned long long>(h),
                                                cases[c].name.c_str());
        continue;
      }
      EXPECT_EQ(h, kWant[c]) << cases[c].name << " on " << vt::CpuIsaName(isa);
      ++checked;
    }
  }
  if (!print) {
    EXPECT_EQ(checked, static_cast<int>(cases.size() * vt_test::IsaLevels().size()));
  }
  std::printf("[ %zu cases on %s ]\n", cases.size(), vt_test::IsaNames().c_str());
}

}  // namespace
