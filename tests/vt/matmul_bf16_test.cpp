// Matmul (BF16 / F32 weights) against a float64 reference of the same input values, for
// every a/b dtype pair, at odd shapes and tails, on every CPU ISA level up to the
// processor's, with 1 and 3 threads, with and without bias, F32 and BF16 out.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "matmul_test_util.h"
#include "vt/vt.h"

namespace {


// Random values stored in `dtype`; `exact` receives the stored values as doubles.
vt::Tensor RandomTensor(int64_t rows, int64_t cols, vt::DType dtype, std::mt19937& rng, std::vector<double>& exact) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-6, 6);
  const size_t n = static_cast<size_t>(rows * cols);
  exact.resize(n);
  std::vector<float> f(n);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = std::ldexp(nd(rng), ex(rng));
    if (dtype == vt::DType::kBF16) {
      h[i] = vt::FloatToBf16(v);
      exact[i] = vt::Bf16ToFloat(h[i]);
    } else {
      f[i] = v;
      exact[i] = v;
    }
  }
  return dtype == vt::DType::kBF16 ? vt::Tensor::FromHost(h.data(), {rows, cols}, dtype)
                                   : vt::Tensor::FromHost(f.data(), {rows, cols}, dtype);
}

std::vector<float> ToFloats(const vt::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == vt::DType::kF32) {
    t.CopyToHost(out.data());
  } else {
    std::vector<uint16_t> h(out.size());
    t.CopyToHost(h.data());
    for (size_t i = 0; i < h.size(); ++i) out[i] = vt::Bf16ToFloat(h[i]);
  }
  return out;
}


TEST(Matmul, MatchesFloat64ReferenceOnEveryIsa) {
  const std::vector<vt_test::Shape3> shapes = {
      {1, 7, 1},   {1, 33, 67},  {2, 5, 31},    {3, 67, 100},  {5, 9, 257},      {16, 13, 33},
      {17, 31, 65}, {64, 11, 129}, {65, 35, 1}, {130, 7, 97}, {1, 173, 2501}, {65, 139, 1500},
      // Small-M streaming path: whole 64-value K steps, K tails past 32, 4-row groups.
      {4, 8, 128}, {8, 13, 64}, {15, 6, 96}, {9, 11, 1600}, {12, 9, 130}, {16, 10, 3000},
      {300, 21, 130}, {33, 17, 64}, {20, 5, 5000}, {70, 33, 4500},
  };
  const std::pair<vt::DType, vt::DType> pairs[] = {{vt::DType::kF32, vt::DType::kBF16},
                                                   {vt::DType::kBF16, vt::DType::kBF16},
                                                   {vt::DType::kF32, vt::DType::kF32},
                                                   {vt::DType::kBF16, vt::DType::kF32}};
  std::mt19937 rng(99);
  for (const vt_test::Shape3& s : shapes) {
    for (auto [adt, bdt] : pairs) {
      std::vector<double> a, b;
      const auto ta = RandomTensor(s.M, s.K, adt, rng, a);
      const auto tb = RandomTensor(s.N, s.K, bdt, rng, b);
      std::vector<double> bias;
      const auto tbias = RandomTensor(1, s.N, vt::DType::kF32, rng, bias).View({s.N});
      std::vector<double> dot(s.M * s.N), mag(s.M * s.N);
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t n = 0; n < s.N; ++n) {
          double d = 0, g = 0;
          for (int64_t k = 0; k < s.K; ++k) {
            d += a[m * s.K + k] * b[n * s.K + k];
            g += std::fabs(a[m * s.K + k] * b[n * s.K + k]);
          }
          dot[m * s.N + n] = d;
          mag[m * s.N + n] = g;
        }
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
        for (int threads : {1, 3}) {
          const vt::Queue q = vt::Queue::Cpu(threads, isa);
          for (vt::DType od : {vt::DType::kF32, vt::DType::kBF16}) {
            for (bool with_bias : {false, true}) {
              // Half of the threads x out x bias product, every pair of the three still met: the
              // epilogue per out dtype and bias does not depend on the thread count.
              if (with_bias != ((threads == 3) != (od == vt::DType::kBF16))) continue;
              SCOPED_TRACE(vt::StrCat("M=", s.M, " N=", s.N, " K=", s.K, " a=", vt::DTypeName(adt), " b=",
                                      vt::DTypeName(bdt), " isa=", vt::CpuIsaName(q.cpu_isa()), " threads=", threads,
                                      " out=", vt::DTypeName(od), " bias=", with_bias));
              auto out = vt::Tensor::Empty({s.M, s.N}, od);
              vt::Matmul(q, out, ta, tb, with_bias ? &tbias : nullptr);
              const auto got = ToFloats(out);
              auto bias_at = [&](int64_t i) { return with_bias ? bias[i % s.N] : 0.0; };
              auto want = [&](int64_t i) { return dot[i] + bias_at(i); };
              vt_test::CheckWithinBound(got, s.N, want, [&](int64_t i) {
                return vt_test::MatmulBound(want(i), mag[i], 1.0, bias_at(i), s.K, od);
              });
            }
          }
        }
      }
    }
  }
  for (vt::CpuIsa isa : vt_test::IsaLevels()) std::cout << "[ Matmul ran on ] " << vt::CpuIsaName(isa) << "\n";
}

TEST(Matmul, RejectsBadOperandsByName) {
  const vt::Queue q = vt::Queue::Cpu(2);
  const auto a = vt::Tensor::Empty({3, 40}, vt::DType::kF32);
  const auto b = vt::Tensor::Empty({8, 41}, vt::DType::kBF16);
  const auto out = vt::Tensor::Empty({3, 8}, vt::DType::kF32);
  try {
    vt::Matmul(q, out, a, b);
    FAIL() << "K mismatch accepted";
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[8, 41]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("K=40"), std::string::npos) << msg;
  }
  const auto b8 = vt::Tensor::Empty({8, 40}, vt::DType::kF8E4M3);
  try {
    vt::Matmul(q, out, a, b8);
    FAIL() << "F8E4M3 weights accepted by Matmul";
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Matmul: b"), std::string::npos) << msg;
    EXPECT_NE(msg.find("F8E4M3"), std::string::npos) << msg;
  }
}

}  // namespace
