// References for the FP8 KV cache (vt/ops/attention.h), built from its definition rather than
// from the code under test: x / scale computed in float64 and rounded once to f32 (exactly
// the f32 IEEE quotient: a double has more than 2·24+2 bits), clamped to ±448, then the
// nearest e4m3fn code by enumerating the grid (elementwise_test_util.h), ties to even.
// Shared by tests/vt and tests/vt_cuda.
#pragma once

#include <cmath>
#include <cstdint>

#include "elementwise_test_util.h"

namespace vt_kvfp8 {

// The byte KvCacheQuantizeFp8(x, scale) must give.
inline uint8_t QuantRef(double x, float scale) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  if (std::isinf(x)) return std::signbit(x) ? 0xFE : 0x7E;
  const double p = static_cast<float>(x / static_cast<double>(scale));  // the f32 quotient
  const double c = std::fmax(-448.0, std::fmin(448.0, p));
  return vt_test::NearestE4M3(std::signbit(p) && c == 0 ? -0.0 : c);
}

// A cached byte read back: the f32 product float(e4m3) * scale, in float64 (exact: 4 + 24 bits).
inline double DequantRef(uint8_t b, float scale) {
  return static_cast<double>(static_cast<float>(vt_test::DecodeE4M3(b)) * scale);
}

// Inputs that probe the quantizer for a scale s: every midpoint between adjacent e4m3 codes
// (the ties) and each code itself, times s, both signs; the specials (±0, NaN of each sign,
// ±Inf, values past 448·s, f32 subnormals).
inline std::vector<float> ProbeInputs(float s) {
  std::vector<float> v;
  for (int c = 0; c < 0x7E; ++c) {
    const double a = vt_test::DecodeE4M3(static_cast<uint8_t>(c)), b = vt_test::DecodeE4M3(static_cast<uint8_t>(c + 1));
    for (double m : {a, 0.5 * (a + b)}) {
      v.push_back(static_cast<float>(m * s));
      v.push_back(static_cast<float>(-m * s));
    }
  }
  const float specials[] = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 449.0f * s, -1e30f, 1e-40f, -1e-45f,
                            464.0f * s, 480.0f * s};
  for (float x : specials) v.push_back(x);
  return v;
}

}  // namespace vt_kvfp8
