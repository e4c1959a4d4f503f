// Helpers shared by the elementwise op tests: independent decoders built from the formats
// (not from vt/dtype.h), the CPU ISA levels to run on, and tensor plumbing.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "vt/vt.h"

namespace vt_test {

// ---- independent decoders --------------------------------------------------------------

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; S.1111.111 is NaN; no infinities.
inline double DecodeE4M3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  double v;
  if (e == 15 && m == 7) v = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(m, -9);
  else v = std::ldexp(8 + m, e - 7 - 3);
  return (c & 0x80) ? -v : v;
}

// IEEE binary16.
inline double DecodeF16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 15 - 10);
  return (h & 0x8000) ? -v : v;
}

// bfloat16: the high half of an f32.
inline float DecodeBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The values of codes 0..0x7E, strictly increasing.
inline const std::vector<double>& E4M3Grid() {
  static const std::vector<double> grid = [] {
    std::vector<double> g;
    for (int c = 0; c <= 0x7E; ++c) g.push_back(DecodeE4M3(static_cast<uint8_t>(c)));
    return g;
  }();
  return grid;
}

// The e4m3fn code nearest to v (|v| <= 448, not NaN); a tie goes to the even code (mantissa
// LSB 0); the sign of v (including -0) is kept. Enumerates the grid: the definition.
inline uint8_t NearestE4M3ByEnumeration(double v) {
  const std::vector<double>& grid = E4M3Grid();
  const double a = std::fabs(v);
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(grid[c] - a), db = std::fabs(grid[best] - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 0x80 : 0));
}

// The same code by a binary search of the grid: the nearest code is one of the two around
// |v|, and a tie between those two goes to the even one (the test util's own test checks
// it against the enumeration). Tests that quantize millions of values use this one.
inline uint8_t NearestE4M3(double v) {
  const std::vector<double>& grid = E4M3Grid();
  const double a = std::fabs(v);
  int best = 0;  // NaN: no comparison holds, as in the enumeration
  if (a == a) {
    const int hi = static_cast<int>(std::lower_bound(grid.begin(), grid.end(), a) - grid.begin());
    if (hi == static_cast<int>(grid.size())) {
      best = 0x7E;
    } else if (hi > 0) {
      const int lo = hi - 1;
      const double dl = a - grid[lo], dh = grid[hi] - a;
      best = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 0x80 : 0));
}

// QuantFp8Static as DESIGN.md states it: p = x * inv in f32 (inv = 1.0f / scale formed
// once), NaN stays NaN with its sign, clamp to [-448, 448], nearest e4m3fn, ties to even.
inline uint8_t QuantRef(float x, float inv) {
  const float p = x * inv;
  if (std::isnan(p)) return std::signbit(p) ? 0xFF : 0x7F;
  const double c = std::fmax(-448.0, std::fmin(448.0, static_cast<double>(p)));
  return NearestE4M3(std::signbit(p) && c == 0 ? -0.0 : c);
}

// ---- ISA levels ------------------------------------------------------------------------

// Every CPU ISA level of this build up to what this processor has, scalar first (the x86
// levels on x86-64, the ARM ones on aarch64).
inline std::vector<vt::CpuIsa> IsaLevels() {
  std::vector<vt::CpuIsa> v;
  for (vt::CpuIsa isa : vt::CpuIsaLevels())
    if (isa <= vt::DetectCpuIsa()) v.push_back(isa);
  return v;
}

// A CPU queue that really runs `isa` (the test fails if the queue picked another level).
inline vt::Queue QueueFor(vt::CpuIsa isa, int threads = 2) {
  vt::Queue q = vt::Queue::Cpu(threads, isa);
  EXPECT_EQ(q.cpu_isa(), isa);
  return q;
}

inline std::string IsaNames() {
  std::string s;
  for (vt::CpuIsa i : IsaLevels()) s += std::string(s.empty() ? "" : ", ") + vt::CpuIsaName(i);
  return s;
}

// ---- tensors ---------------------------------------------------------------------------

// A CPU tensor of `dtype` holding `v` (rounded to dtype by vt's conversions).
inline vt::Tensor MakeTensor(const std::vector<float>& v, const vt::Shape& shape, vt::DType dtype) {
  vt::Tensor t = vt::Tensor::Empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case vt::DType::kF32: t.data_as<float>()[i] = v[i]; break;
      case vt::DType::kBF16: t.data_as<uint16_t>()[i] = vt::FloatToBf16(v[i]); break;
      case vt::DType::kF16: t.data_as<uint16_t>()[i] = vt::FloatToF16(v[i]); break;
      default: ADD_FAILURE() << "MakeTensor: unsupported dtype";
    }
  }
  return t;
}

// n samples of N(0, sigma^2) from a generator seeded with `seed`.
inline std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Element i of a F32/BF16/F16 tensor, decoded independently.
inline double ValueAt(const vt::Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case vt::DType::kF32: return t.data_as<float>()[i];
    case vt::DType::kBF16: return DecodeBf16(t.data_as<uint16_t>()[i]);
    case vt::DType::kF16: return DecodeF16(t.data_as<uint16_t>()[i]);
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

inline std::vector<uint8_t> BytesOf(const vt::Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  t.CopyToHost(b.data());
  return b;
}

inline vt::Tensor Clone(const vt::Tensor& t) {
  vt::Tensor c = vt::Tensor::Empty(t.shape(), t.dtype());
  c.CopyFrom(t);
  return c;
}

// Index of the first differing byte, or -1.
inline int64_t FirstDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

inline const char* Name(vt::DType d) { return vt::DTypeName(d).data(); }

// Runs fn, expects a vt::Error whose message contains every one of `parts`.
inline void ExpectErrorWith(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no vt::Error thrown (expected one mentioning " << parts.front() << ")";
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  }
}

}  // namespace vt_test
