// Scalar arithmetic that every backend must reproduce bit for bit.
//
// The quantizers and the fused recipes promise byte-identical results across backends, so
// the few non-trivial functions they use (exp, silu, the fp8 conversion, RMS reductions)
// are defined here once, with only IEEE-exact operations (+, *, /, sqrt, fma, and bit
// manipulation), and compiled for both host and device. Vector kernels must perform the
// same operations in the same order.
#pragma once

#include <bit>
#include <cstdint>

#include "vt/dtype.h"

namespace vt::numerics {

VT_HD float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

VT_HD float BitsToFloat(uint32_t u) { return detail::BitsFloat(u); }
VT_HD uint32_t FloatToBits(float f) { return detail::FloatBits(f); }

// Round to nearest integer, ties to even (|x| < 2^22), via the 1.5*2^23 trick.
VT_HD float RoundEven(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return (x + magic) - magic;
}

// e^x for f32 with ~1 ulp error, identical on every backend: Cody-Waite range reduction
// x = n*ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r evaluated with fma in a fixed
// order, then scaling by 2^n through the exponent bits (two steps, so n down to -149 works).
VT_HD float Exp(float x) {
  if (!(x == x)) return x;                // NaN
  if (x > 88.72283935546875f) return BitsToFloat(0x7F800000u);  // overflow to +Inf
  if (x < -103.97208404541015625f) return 0.0f;                 // underflow to +0
  const float n = RoundEven(x * 1.44269502162933349609375f);    // x / ln2
  float r = Fma(n, -0.693145751953125f, x);                    // ln2 high part (exact product)
  r = Fma(n, -1.428606765330187045e-06f, r);                   // ln2 low part
  float p = 1.0f / 5040.0f;
  p = Fma(p, r, 1.0f / 720.0f);
  p = Fma(p, r, 1.0f / 120.0f);
  p = Fma(p, r, 1.0f / 24.0f);
  p = Fma(p, r, 1.0f / 6.0f);
  p = Fma(p, r, 0.5f);
  p = Fma(p, r, 1.0f);
  p = Fma(p, r, 1.0f);
  // 2^n as two factors so that results in the subnormal range stay exact-ish.
  const int ni = static_cast<int>(n);
  const int n1 = ni / 2;
  const int n2 = ni - n1;
  const float s1 = BitsToFloat(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = BitsToFloat(static_cast<uint32_t>(n2 + 127) << 23);
  return (p * s1) * s2;
}

// silu(x) = x / (1 + e^-x).
VT_HD float Silu(float x) { return x / (1.0f + Exp(-x)); }

// x * inv, clamped to [-448, 448] (+-Inf saturate, NaN passes), rounded to e4m3fn (RNE).
VT_HD uint8_t QuantizeFp8(float x, float inv) {
  float v = x * inv;
  // Written so that NaN fails both comparisons and passes through unchanged.
  if (v > kFp8E4M3Max) v = kFp8E4M3Max;
  if (v < -kFp8E4M3Max) v = -kFp8E4M3Max;
  return FloatToFp8E4M3(v);
}

VT_HD float Bf16Round(float f) {
  uint32_t u = FloatToBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return BitsToFloat((u | 0x00400000u) & 0xFFFF0000u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return BitsToFloat(u & 0xFFFF0000u);
}

// Sum of squares of n floats in the canonical order every backend uses: 32 lanes, lane j
// accumulates elements j, j+32, j+64, ... with fma; then lanes are combined pairwise
// (j += j+16, then j += j+8, ..., j += j+1). A CUDA warp gets the same order with one
// element stream per lane and xor shuffles; AVX-512 with two 16-wide accumulators.
template <typename Load>
VT_HD float SumSquaresCanonical(int64_t n, Load load) {
  float lane[32];
  for (int j = 0; j < 32; ++j) lane[j] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = load(i);
    lane[i & 31] = Fma(v, v, lane[i & 31]);
  }
  for (int off = 16; off >= 1; off /= 2)
    for (int j = 0; j < off; ++j) lane[j] = lane[j] + lane[j + off];
  return lane[0];
}

// 1 / sqrt(sum_sq / n + eps), with IEEE division and sqrt (no approximate rsqrt).
VT_HD float RmsInverse(float sum_sq, int64_t n, float eps) {
#if defined(__CUDA_ARCH__)
  return 1.0f / __fsqrt_rn(sum_sq / static_cast<float>(n) + eps);
#else
  return 1.0f / __builtin_sqrtf(sum_sq / static_cast<float>(n) + eps);
#endif
}

}  // namespace vt::numerics
