// QuantFp8PerTokenGroup against an independent reference built from the formats' text
// (vt/ops/quant.h): amax in float64 over the group's non-NaN magnitudes, the scale and
// x / s each computed in float64 and rounded once to f32 (exactly the f32 IEEE results:
// a double has more than 2·24+2 bits), then the nearest of the e4m3fn codes, ties to even
// (elementwise_test_util.h enumerates the grid). Every CPU ISA level, every input dtype,
// both formats' floors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "elementwise_test_util.h"

namespace {

using vt::DType;

struct Ref {
  std::vector<uint8_t> q;
  std::vector<float> s;
};

Ref Reference(const vt::Tensor& x, int64_t G, double amax_floor, double scale_floor) {
  const int64_t M = x.dim(0), K = x.dim(1), groups = (K + G - 1) / G;
  Ref r{std::vector<uint8_t>(static_cast<size_t>(M * K)), std::vector<float>(static_cast<size_t>(M * groups))};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * G, k1 = std::min(K, k0 + G);
      double amax = 0;
      for (int64_t k = k0; k < k1; ++k) {
        const double v = vt_test::ValueAt(x, m * K + k);
        if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
      }
      float s = static_cast<float>(std::max(amax, amax_floor) / 448.0);
      s = std::max(s, static_cast<float>(scale_floor));
      r.s[m * groups + g] = s;
      for (int64_t k = k0; k < k1; ++k) {
        const double v = vt_test::ValueAt(x, m * K + k);
        uint8_t code;
        if (std::isnan(v))
          code = std::signbit(v) ? 0xFF : 0x7F;
        else if (std::isinf(v))
          code = std::signbit(v) ? 0xFE : 0x7E;  // saturates to -+448
        else {
          const double p = static_cast<float>(v / static_cast<double>(s));  // f32 x / s
          code = vt_test::NearestE4M3(std::signbit(p) ? -std::min(448.0, -p) : std::min(448.0, p));
        }
        r.q[m * K + k] = code;
      }
    }
  return r;
}

struct Fmt {
  const char* name;
  float amax_floor, scale_floor;
};
const Fmt kFormats[] = {{"block", vt::kFp8BlockAmaxFloor, 0.0f}, {"token", 0.0f, vt::kFp8PerTokenScaleFloor}};

// Runs the op on every ISA level and dtype, both formats; bytes and scales must equal Reference.
void CheckAll(const std::string& what, const std::vector<float>& v, int64_t M, int64_t K, int64_t G) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const vt::Tensor x = vt_test::MakeTensor(v, {M, K}, dt);
    for (const Fmt& f : kFormats) {
      const Ref want = Reference(x, G, f.amax_floor, f.scale_floor);
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
        vt::Queue q = vt_test::QueueFor(isa);
        const int64_t groups = (K + G - 1) / G;
        vt::Tensor out = vt::Tensor::Empty({M, K}, DType::kF8E4M3), sc = vt::Tensor::Empty({M, groups}, DType::kF32);
        vt::QuantFp8PerTokenGroup(q, out, sc, x, G, f.amax_floor, f.scale_floor);
        const std::vector<uint8_t> got = vt_test::BytesOf(out);
        const float* gs = sc.data_as<float>();
        int bad = 0;
        for (int64_t i = 0; i < M * groups && bad < 5; ++i)
          if (vt_test::Bits(gs[i]) != vt_test::Bits(want.s[i]))
            ADD_FAILURE() << what << " " << vt::DTypeName(dt) << " " << f.name << " on " << vt::CpuIsaName(isa)
                          << ": scale[" << i << "] = " << gs[i] << ", want " << want.s[i] << (++bad, "");
        for (int64_t i = 0; i < M * K && bad < 5; ++i)
          if (got[i] != want.q[i])
            ADD_FAILURE() << what << " " << vt::DTypeName(dt) << " " << f.name << " on " << vt::CpuIsaName(isa)
                          << ": out[" << i / K << ", " << i % K << "] of x = " << vt_test::ValueAt(x, i) << " is 0x"
                          << std::hex << int(got[i]) << ", want 0x" << int(want.q[i]) << std::dec << (++bad, "");
      }
    }
  }
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-20.0f, 12.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng) * std::exp2(ex(rng));
  return v;
}

TEST(QuantFp8PerTokenGroup, RandomGroupsWithPartialLastGroup) {
  struct S {
    int64_t M, K, G;
  };
  for (const S& s : {S{1, 128, 128}, S{3, 300, 128}, S{5, 1000, 128}, S{2, 4096, 128}, S{4, 77, 77},
                     S{3, 1000, 1000}, S{7, 33, 8}, S{2, 129, 128}, S{1, 5, 1}})
    CheckAll(vt::StrCat(s.M, "x", s.K, " group ", s.G), Random(s.M * s.K, static_cast<uint32_t>(s.K * 31 + s.G)),
             s.M, s.K, s.G);
}

TEST(QuantFp8PerTokenGroup, ZeroTinyAndSpecialGroups) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t K = 40, G = 8;  // 5 groups per row
  std::vector<float> v = Random(6 * K, 99);
  for (int64_t k = 0; k < K; ++k) {
    v[0 * K + k] = (k & 1) ? -0.0f : 0.0f;  // all-zero row: the floors decide
    v[1 * K + k] *= 1e-36f;                 // tiny: under the per-token floor, subnormal f32
    v[2 * K + k] = std::ldexp(1.0f, -140) * static_cast<float>(k % 5);  // subnormal f32 magnitudes
  }
  v[3 * K + 0] = nan;  // a NaN among finite values: left out of amax
  v[3 * K + 9] = -nan;
  for (int64_t k = 16; k < 24; ++k) v[3 * K + k] = (k & 1) ? -nan : nan;  // an all-NaN group
  v[4 * K + 1] = inf;  // infinities: the group's scale is +Inf
  v[4 * K + 10] = -inf;
  v[4 * K + 11] = inf;
  v[5 * K + 3] = 3e38f;  // near the f32 maximum
  v[5 * K + 12] = -448.0f * 464.0f / 448.0f;
  CheckAll("specials", v, 6, K, G);
}

// The cases the definitions pin down, written out.
TEST(QuantFp8PerTokenGroup, DocumentedSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {0.0f, -0.0f, 0.0f, 0.0f,  // all zero
                                nan, 2.0f, -nan, -1.0f,   // NaN left out of amax
                                inf, 1.0f, -inf, -2.0f};  // Inf: scale Inf
  const vt::Tensor x = vt_test::MakeTensor(v, {1, 12}, DType::kF32);
  vt::Queue q = vt::Queue::Cpu(1);
  vt::Tensor out = vt::Tensor::Empty({1, 12}, DType::kF8E4M3), sc = vt::Tensor::Empty({1, 3}, DType::kF32);
  vt::QuantFp8PerTokenGroup(q, out, sc, x, 4, vt::kFp8BlockAmaxFloor, 0.0f);
  const std::vector<uint8_t> b = vt_test::BytesOf(out);
  const float* s = sc.data_as<float>();
  EXPECT_EQ(s[0], 1e-10f / 448.0f);
  EXPECT_EQ(s[1], 2.0f / 448.0f);
  EXPECT_TRUE(std::isinf(s[2]) && s[2] > 0);
  const std::vector<uint8_t> want = {0x00, 0x80, 0x00, 0x00, 0x7F, 0x7E, 0xFF, 0xF6, 0x7E, 0x00, 0xFE, 0x80};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(int(b[i]), int(want[i])) << "element " << i;
  vt::QuantFp8PerTokenGroup(q, out, sc, x, 4, 0.0f, vt::kFp8PerTokenScaleFloor);
  EXPECT_EQ(sc.data_as<float>()[0], 1.0f / (448.0f * 512.0f));
}

// The reference divides; a multiply by the reciprocal of s gives other bytes on some of
// these inputs, so the test tells the two apart (a mutation to x * (1/s) goes red).
TEST(QuantFp8PerTokenGroup, DivideIsNotReciprocalMultiply) {
  const int64_t K = 128;
  std::vector<float> v(static_cast<size_t>(K * 64));
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> code(1, 0x7D);
  for (int64_t r = 0; r < 64; ++r) {
    const float s = (1.0f + static_cast<float>(r) * 0.0137f) / 448.0f * 3.0f;
    v[r * K] = 448.0f * s;  // sets amax: the scale is about s
    for (int64_t k = 1; k < K; ++k) {
      const int c = code(rng);
      const float mid = 0.5f * (vt::Fp8E4M3ToFloat(static_cast<uint8_t>(c)) + vt::Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1)));
      v[r * K + k] = mid * s;
    }
  }
  const vt::Tensor x = vt_test::MakeTensor(v, {64, K}, DType::kF32);
  const Ref want = Reference(x, K, vt::kFp8BlockAmaxFloor, 0.0f);
  int differ = 0;
  for (int64_t r = 0; r < 64; ++r) {
    const float inv = 1.0f / want.s[r];
    for (int64_t k = 0; k < K; ++k) differ += vt_test::QuantRef(v[r * K + k], inv) != want.q[r * K + k];
  }
  EXPECT_GT(differ, 0) << "no input separates x / s from x * (1/s)";
  CheckAll("ties", v, 64, K, K);
}

TEST(QuantFp8PerTokenGroup, RejectsBadArguments) {
  vt::Queue q = vt::Queue::Cpu(1);
  const vt::Tensor x = vt_test::MakeTensor(std::vector<float>(10, 1.0f), {2, 5}, DType::kF32);
  vt::Tensor out = vt::Tensor::Empty({2, 5}, DType::kF8E4M3), sc = vt::Tensor::Empty({2, 2}, DType::kF32);
  EXPECT_THROW(vt::QuantFp8PerTokenGroup(q, out, sc, x, 4, 0.0f, 0.0f), vt::Error);
  EXPECT_THROW(vt::QuantFp8PerTokenGroup(q, out, sc, x, 0, 1e-10f, 0.0f), vt::Error);
  EXPECT_THROW(vt::QuantFp8PerTokenGroup(q, out, sc, x, 2, 1e-10f, 0.0f), vt::Error);  // scales must be [2, 3]
  EXPECT_THROW(vt::QuantFp8PerTokenGroup(q, out, sc, x, 4, -1.0f, 1.0f), vt::Error);
  EXPECT_NO_THROW(vt::QuantFp8PerTokenGroup(q, out, sc, x, 4, 1e-10f, 0.0f));
  EXPECT_EQ(sc.data_as<float>()[1], 1.0f / 448.0f);  // the partial group of one element
}

}  // namespace
