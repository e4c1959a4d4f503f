// What the CPU matmul tests (matmul_fp8_test.cpp, matmul_bf16_test.cpp) share: the DESIGN
// accuracy bound checked against a float64 reference (and, through elementwise_test_util.h,
// the ISA levels to force).
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "elementwise_test_util.h"  // IsaLevels
#include "vt/vt.h"

namespace vt_test {


// Random fp8 codes, NaN codes excluded (MatmulFp8.NanCodesPropagate tests those).
inline std::vector<uint8_t> RandomFp8(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(code(rng));
    while ((b & 0x7F) == 0x7F);
  }
  return v;
}

struct Shape3 {
  int64_t M, N, K;
};

// The DESIGN bound for an output whose float64 reference is `ref`, Σ|a·b| = mag:
// 4·K·FLT_EPSILON·|alpha|·mag, the f32 bias addition, and one rounding of the out dtype.
inline double MatmulBound(double ref, double mag, double alpha, double bias, int64_t K, vt::DType out) {
  const double acc = 4.0 * static_cast<double>(K) * FLT_EPSILON * std::fabs(alpha) * mag + FLT_EPSILON * std::fabs(bias);
  const double rounding = out == vt::DType::kBF16 ? std::ldexp(std::fabs(ref) + acc, -8) : 0.0;
  return acc + rounding + 1e-30;
}

// Checks got[i] (row-major [M, N]) against want(i) within bound(i); reports the first
// five outside it as test failures and returns how many there were.
template <typename Want, typename Bound>
int CheckWithinBound(const std::vector<float>& got, int64_t N, Want want, Bound bound) {
  int bad = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const double w = want(i), tol = bound(i);
    if (!(std::fabs(got[i] - w) <= tol) && bad++ < 5)
      ADD_FAILURE() << "out[" << i / N << ", " << i % N << "] = " << got[i] << ", float64 reference " << w
                    << ", bound " << tol;
  }
  return bad;
}

}  // namespace vt_test
