// What the CPU matmul tests (matmul_fp8_test.cpp, matmul_bf16_test.cpp) share: the DESIGN
// accuracy bound checked against a float64 reference (and, through elementwise_test_util.h,
// the ISA levels to force).
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <numeric>
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

// The 256 e4m3fn codes decoded from the format: 1 sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 is subnormal (m * 2^-9); S.1111.111 is NaN.
inline const std::vector<double>& Fp8Values() {
  static const std::vector<double> table = [] {
    std::vector<double> t(256);
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      double v;
      if (e == 15 && m == 7) {
        v = std::nan("");
      } else if (e == 0) {
        v = std::ldexp(static_cast<double>(m), -9);
      } else {
        v = std::ldexp(1.0 + m / 8.0, e - 7);
      }
      t[c] = (c & 0x80) ? -v : v;
    }
    return t;
  }();
  return table;
}

// A F32 or BF16 tensor's values as floats.
inline std::vector<float> ToFloats(const vt::Tensor& t) {
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

// Float64 products of the fp8 operands: dot[m,n] = Σ a·b, mag[m,n] = Σ |a·b|.
struct Reference {
  std::vector<double> dot, mag;
};

inline Reference ComputeReference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t M, int64_t N,
                           int64_t K) {
  const auto& v = Fp8Values();
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, t = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = v[a[m * K + k]] * v[b[n * K + k]];
        s += p;
        t += std::fabs(p);
      }
      r.dot[m * N + n] = s;
      r.mag[m * N + n] = t;
    }
  return r;
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

// Random MoE routing of T tokens: each token's k distinct experts of E (a shuffle), and a
// weight in [0.1, 1) each, appended to ids and weights ([T, k] row-major).
inline void RandomRouting(int64_t T, int64_t E, int64_t k, std::mt19937& rng, std::vector<int32_t>& ids,
                          std::vector<float>& weights) {
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> all(static_cast<size_t>(E));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < k; ++j) {
      ids.push_back(all[j]);
      weights.push_back(std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
    }
  }
}

}  // namespace vt_test
