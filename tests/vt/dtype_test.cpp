// The scalar dtype conversions of vt/dtype.h against references built from the formats:
// every BF16/F16 code, every e4m3fn code, round-to-nearest-even at exact midpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "elementwise_test_util.h"

namespace {

using vt_test::Bits;
using vt_test::FromBits;

// Sorted finite non-negative values of a format and their codes.
struct Grid {
  std::vector<double> value;
  std::vector<uint32_t> code;
};

Grid F16Grid() {
  Grid g;
  for (uint32_t c = 0; c < 0x7C00; ++c) {
    g.value.push_back(vt_test::DecodeF16(static_cast<uint16_t>(c)));
    g.code.push_back(c);
  }
  return g;
}

// The code nearest to |v| (ties to the even code); past the largest finite value by half an
// ulp or more: `overflow`.
uint32_t Nearest(const Grid& g, double a, double overflow_at, uint32_t overflow) {
  if (a >= overflow_at) return overflow;
  const auto it = std::lower_bound(g.value.begin(), g.value.end(), a);
  const size_t hi = static_cast<size_t>(it - g.value.begin());
  if (hi == 0) return g.code[0];
  if (hi == g.value.size()) return g.code.back();
  const size_t lo = hi - 1;
  const double dl = a - g.value[lo], dh = g.value[hi] - a;
  if (dl < dh) return g.code[lo];
  if (dh < dl) return g.code[hi];
  return (g.code[lo] & 1) == 0 ? g.code[lo] : g.code[hi];
}

TEST(DTypeBf16, AllCodesDecodeAndRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const float f = vt::Bf16ToFloat(h);
    ASSERT_EQ(Bits(f), c << 16) << "code 0x" << std::hex << c;
    if (std::isnan(f)) {
      const uint16_t back = vt::FloatToBf16(f);
      EXPECT_TRUE(std::isnan(vt::Bf16ToFloat(back))) << std::hex << c;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << "NaN sign, code 0x" << std::hex << c;
    } else {
      ASSERT_EQ(vt::FloatToBf16(f), h) << "code 0x" << std::hex << c;
    }
  }
}

TEST(DTypeBf16, RoundsToNearestEven) {
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    if (((u >> 23) & 0xFF) == 0xFF) continue;  // NaN/Inf covered above
    if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exact midpoint
    const float f = FromBits(u);
    // Independent: the two neighbours by truncation, nearest wins, ties to even.
    // Magnitudes; the code past the largest finite one (Inf) stands for 2^128 in rounding.
    const uint32_t lo = u >> 16, hi = lo + 1;
    const double a = std::fabs(static_cast<double>(f));
    const double vh = ((hi & 0x7FFF) == 0x7F80) ? std::ldexp(1.0, 128) : std::fabs(vt_test::DecodeBf16(hi));
    const double dl = a - std::fabs(vt_test::DecodeBf16(lo));
    const double dh = vh - a;
    const uint32_t want = dl < dh ? lo : dh < dl ? hi : ((lo & 1) == 0 ? lo : hi);
    ASSERT_EQ(vt::FloatToBf16(f), want) << std::hexfloat << f;
  }
}

TEST(DTypeF16, AllCodesDecodeAndRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const double want = vt_test::DecodeF16(h);
    const float f = vt::F16ToFloat(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << c;
      EXPECT_EQ(std::signbit(f), (c & 0x8000) != 0);
      EXPECT_TRUE(std::isnan(vt::F16ToFloat(vt::FloatToF16(f))));
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << "code 0x" << std::hex << c;
    ASSERT_EQ(std::signbit(f), (c & 0x8000) != 0) << std::hex << c;
    ASSERT_EQ(vt::FloatToF16(f), h) << "code 0x" << std::hex << c;
  }
}

TEST(DTypeF16, RoundsToNearestEvenAtMidpointsAndRandom) {
  const Grid g = F16Grid();
  const double overflow_at = 65504.0 + 16.0;  // half an ulp past the largest finite value
  auto want = [&](float f) {
    const uint32_t sign = std::signbit(f) ? 0x8000 : 0;
    return sign | Nearest(g, std::fabs(static_cast<double>(f)), overflow_at, 0x7C00);
  };
  // Every midpoint between neighbours (exact in f32), and one f32 ulp either side.
  for (size_t i = 0; i + 1 < g.value.size(); ++i) {
    const float mid = static_cast<float>((g.value[i] + g.value[i + 1]) / 2);
    ASSERT_EQ(static_cast<double>(mid), (g.value[i] + g.value[i + 1]) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) ASSERT_EQ(vt::FloatToF16(f), want(f)) << std::hexfloat << f;
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e6f, std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), 1e-30f})
    EXPECT_EQ(vt::FloatToF16(f), want(f)) << std::hexfloat << f;
  EXPECT_EQ(vt::FloatToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> e(-30, 17);
  for (int i = 0; i < 300000; ++i) {
    const float f = static_cast<float>(std::exp2(e(rng)) * ((rng() & 1) ? 1 : -1));
    ASSERT_EQ(vt::FloatToF16(f), want(f)) << std::hexfloat << f;
  }
}

TEST(DTypeFp8E4M3, AllCodesDecodeAndRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t b = static_cast<uint8_t>(c);
    const double want = vt_test::DecodeE4M3(b);
    const float f = vt::Fp8E4M3ToFloat(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(vt::FloatToFp8E4M3(f), b) << "NaN keeps its sign";
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << "code 0x" << std::hex << c;
    ASSERT_EQ(std::signbit(f), (c & 0x80) != 0);
    ASSERT_EQ(vt::FloatToFp8E4M3(f), b) << "code 0x" << std::hex << c;
  }
  EXPECT_EQ(vt::Fp8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(vt::Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
}

TEST(DTypeFp8E4M3, RoundsToNearestEvenIncludingSubnormals) {
  auto check = [](float f) {
    const double a = std::fabs(static_cast<double>(f));
    uint8_t want;
    if (std::isnan(f) || a > 464.0) want = 0x7F | (std::signbit(f) ? 0x80 : 0);  // PyTorch: NaN past 464
    else want = vt_test::NearestE4M3(f);
    ASSERT_EQ(vt::FloatToFp8E4M3(f), want) << std::hexfloat << f;
  };
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>((vt_test::DecodeE4M3(c) + vt_test::DecodeE4M3(c + 1)) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid, -std::nextafter(mid, 0.0f)})
      check(f);
  }
  for (float f : {464.0f, 463.9f, 464.1f, 480.0f, 1e9f, -464.0f, 0.0f, -0.0f, 1e-40f, -1e-40f}) check(f);
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> e(-14, 9);
  for (int i = 0; i < 200000; ++i) check(static_cast<float>(std::exp2(e(rng)) * ((rng() & 1) ? 1 : -1)));
}

// The tests' e4m3fn rounding (a binary search of the grid) against its definition, the
// enumeration of every code: at each code, each midpoint and the doubles beside both, ±0,
// NaN, past 448, and a million random magnitudes over the whole range.
TEST(TestUtil, NearestE4M3SearchEqualsTheEnumeration) {
  auto same = [](double v) {
    ASSERT_EQ(vt_test::NearestE4M3(v), vt_test::NearestE4M3ByEnumeration(v)) << std::hexfloat << v;
  };
  for (int c = 0; c <= 0x7E; ++c) {
    const double a = vt_test::DecodeE4M3(static_cast<uint8_t>(c));
    const double mid = c < 0x7E ? (a + vt_test::DecodeE4M3(static_cast<uint8_t>(c + 1))) / 2 : 460.0;
    for (double x : {a, mid, std::nextafter(a, 0.0), std::nextafter(a, 1e9), std::nextafter(mid, 0.0),
                     std::nextafter(mid, 1e9)}) {
      same(x);
      same(-x);
    }
  }
  for (double x : {0.0, -0.0, std::nan(""), -std::nan(""), 448.0, 449.0, 1e300, std::ldexp(1.0, -12)}) same(x);
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> e(-12, 9);
  for (int i = 0; i < 1000000; ++i) same(std::exp2(e(rng)) * ((rng() & 1) ? 1 : -1));
}

TEST(DTypeTable, NamesAndSizes) {
  EXPECT_EQ(vt::DTypeSize(vt::DType::kF8E4M3), 1u);
  EXPECT_EQ(vt::DTypeSize(vt::DType::kBF16), 2u);
  EXPECT_EQ(vt::DTypeName(vt::DType::kF8E4M3), "F8E4M3");
  EXPECT_EQ(vt::DTypeName(vt::DType::kI64), "I64");
}

}  // namespace
