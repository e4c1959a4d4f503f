// RmsNorm (with and without residual) and RmsNormGated on the scalar kernels: close to a
// float64 reference. That every ISA level and backend gives the scalar bytes is the op
// table's check (op_table_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "elementwise_test_util.h"

namespace {

const int64_t kWidths[] = {1, 3, 17, 64, 1000, 1023, 4097};
const vt::DType kDTypes[] = {vt::DType::kF32, vt::DType::kBF16, vt::DType::kF16};

std::vector<float> Random(size_t n, uint32_t seed, float mean, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, sd);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

// Relative precision of a dtype (one unit in the last place at 1.0).
double Ulp(vt::DType d) {
  switch (d) {
    case vt::DType::kBF16: return std::ldexp(1.0, -7);
    case vt::DType::kF16: return std::ldexp(1.0, -10);
    default: return std::ldexp(1.0, -23);
  }
}

// |got - want| within 4 output ulps of the magnitude (two roundings to the output dtype,
// one of the input sum, plus f32 arithmetic).
void ExpectClose(const vt::Tensor& out, const std::vector<double>& want, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = vt_test::ValueAt(out, static_cast<int64_t>(i));
    const double tol = 4 * Ulp(out.dtype()) * std::fabs(want[i]) + 1e-6;
    if (!(std::fabs(got - want[i]) <= tol) && bad++ < 3)
      ADD_FAILURE() << what << ": element " << i << " got " << got << " want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// v rounded to nearest even with the significand width of d (normal range), independently of vt.
double RoundToDType(double v, vt::DType d) {
  if (d == vt::DType::kF32) return static_cast<float>(v);
  const int bits = d == vt::DType::kBF16 ? 8 : 11;
  int e;
  const double m = std::frexp(v, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

double SiluRef(double g) { return g / (1.0 + std::exp(-g)); }

TEST(RmsNorm, ScalarCloseToFloat64) {
  for (int64_t H : kWidths) {
    const int64_t R = 3;
    for (vt::DType dt : kDTypes) {
      for (vt::DType od : kDTypes) {
        for (bool with_res : {false, true}) {
          vt::Tensor x = vt_test::MakeTensor(Random(R * H, H, 0.3f, 2.0f), {R, H}, dt);
          vt::Tensor w = vt_test::MakeTensor(Random(H, H + 1, 1.0f, 0.2f), {H}, od);
          vt::Tensor res0 = vt_test::MakeTensor(Random(R * H, H + 2, 0.0f, 1.0f), {R, H}, dt);
          // float64 reference from the values the tensors hold.
          std::vector<double> want(R * H), sum(R * H);
          for (int64_t r = 0; r < R; ++r) {
            double ss = 0;
            for (int64_t i = 0; i < H; ++i) {
              double s = vt_test::ValueAt(x, r * H + i);
              if (with_res) s = RoundToDType(s + vt_test::ValueAt(res0, r * H + i), dt);  // sum in x's dtype
              sum[r * H + i] = s;
              ss += s * s;
            }
            const double inv = 1.0 / std::sqrt(ss / H + 1e-6);
            for (int64_t i = 0; i < H; ++i) want[r * H + i] = sum[r * H + i] * inv * vt_test::ValueAt(w, i);
          }
          vt::Tensor out = vt::Tensor::Empty({R, H}, od);
          vt::Tensor res = vt_test::Clone(res0);
          vt::RmsNorm(vt_test::QueueFor(vt::CpuIsa::kScalar), out, x, w, 1e-6f, with_res ? &res : nullptr);
          const std::string what = "H=" + std::to_string(H) + " x " + vt_test::Name(dt) + " out " +
                                   vt_test::Name(od) + (with_res ? " +residual" : "");
          ExpectClose(out, want, what);
          if (with_res) {
            for (int64_t i = 0; i < R * H; ++i)
              ASSERT_EQ(vt_test::ValueAt(res, i), sum[i]) << what << ": residual not updated to x + residual at " << i;
          }
        }
      }
    }
  }
}

TEST(RmsNormGated, ScalarCloseToFloat64) {
  for (int64_t H : kWidths) {
    const int64_t R = 3;
    for (vt::DType dt : kDTypes) {
      vt::Tensor x = vt_test::MakeTensor(Random(R * H, H + 3, 0.0f, 1.0f), {R, H}, dt);
      vt::Tensor gate = vt_test::MakeTensor(Random(R * H, H + 4, 0.0f, 3.0f), {R, H}, dt);
      vt::Tensor w = vt_test::MakeTensor(Random(H, H + 5, 1.0f, 0.2f), {H}, dt);
      std::vector<double> want(R * H);
      for (int64_t r = 0; r < R; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < H; ++i) ss += std::pow(vt_test::ValueAt(x, r * H + i), 2);
        const double inv = 1.0 / std::sqrt(ss / H + 1e-5);
        for (int64_t i = 0; i < H; ++i)
          want[r * H + i] = vt_test::ValueAt(x, r * H + i) * inv * vt_test::ValueAt(w, i) *
                            SiluRef(vt_test::ValueAt(gate, r * H + i));
      }
      vt::Tensor out = vt::Tensor::Empty({R, H}, dt);
      vt::RmsNormGated(vt_test::QueueFor(vt::CpuIsa::kScalar), out, x, gate, w, 1e-5f);
      ExpectClose(out, want, "H=" + std::to_string(H) + " " + vt_test::Name(dt));
    }
  }
}

}  // namespace
