// SiluMul: the scalar kernel close to a float64 reference; gate values beyond Exp's range
// and non-finite ones give their limits and the same bytes on every CPU ISA level. The op
// table (op_table_test.cpp) checks every level and backend against the scalar bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "elementwise_test_util.h"

namespace {

TEST(SiluMul, ScalarCloseToFloat64) {
  for (int64_t I : {1, 3, 17, 100, 1023, 4097}) {
    const int64_t R = 3;
    for (vt::DType dt : {vt::DType::kF32, vt::DType::kBF16, vt::DType::kF16}) {
      for (vt::DType od : {vt::DType::kF32, vt::DType::kBF16, vt::DType::kF16}) {
        std::mt19937 rng(static_cast<uint32_t>(I));
        std::normal_distribution<float> nd(0.0f, 5.0f);
        std::vector<float> v(R * 2 * I);
        for (float& f : v) f = nd(rng);
        vt::Tensor x = vt_test::MakeTensor(v, {R, 2 * I}, dt);
        std::vector<double> want(R * I);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t i = 0; i < I; ++i) {
            const double g = vt_test::ValueAt(x, r * 2 * I + i), u = vt_test::ValueAt(x, r * 2 * I + I + i);
            want[r * I + i] = g / (1.0 + std::exp(-g)) * u;
          }
        vt::Tensor out = vt::Tensor::Empty({R, I}, od);
        vt::SiluMul(vt_test::QueueFor(vt::CpuIsa::kScalar), out, x);
        const std::string what = "I=" + std::to_string(I) + " x " + vt_test::Name(dt) + " out " + vt_test::Name(od);
        const double ulp = od == vt::DType::kBF16 ? 0x1p-7 : od == vt::DType::kF16 ? 0x1p-10 : 0x1p-21;
        int bad = 0;
        for (int64_t i = 0; i < R * I; ++i) {
          const double got = vt_test::ValueAt(out, i);
          if (!(std::fabs(got - want[i]) <= 2 * ulp * std::fabs(want[i]) + 1e-6) && bad++ < 3)
            ADD_FAILURE() << what << ": element " << i << " got " << got << " want " << want[i];
        }
      }
    }
  }
}

TEST(SiluMul, ExtremeGatesSameBytesOnEveryIsa) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> gate = {0.0f, -0.0f, 88.7f, 88.73f, 89.0f, -103.9f, -104.0f, -200.0f, 200.0f, inf, -inf,
                             std::nanf(""), 1e-30f, -1e-30f, 20.0f, -20.0f, 0.5f};
  const int64_t I = static_cast<int64_t>(gate.size());
  std::vector<float> v = gate;
  for (int64_t i = 0; i < I; ++i) v.push_back(1.5f);
  vt::Tensor x = vt_test::MakeTensor(v, {1, 2 * I}, vt::DType::kF32);
  std::vector<uint8_t> first;
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    vt::Tensor out = vt::Tensor::Empty({1, I}, vt::DType::kF32);
    vt::SiluMul(vt_test::QueueFor(isa), out, x);
    EXPECT_EQ(out.data_as<float>()[0], 0.0f);
    EXPECT_EQ(out.data_as<float>()[9], inf);  // silu(+Inf) * 1.5
    EXPECT_TRUE(std::isnan(out.data_as<float>()[11]));
    if (first.empty()) first = vt_test::BytesOf(out);
    else EXPECT_EQ(vt_test::FirstDiff(vt_test::BytesOf(out), first), -1) << vt::CpuIsaName(isa) << " vs scalar";
  }
}

}  // namespace

// SigmoidGatedAdd against float64: base + sigmoid(gate) * x, a gate per row or per element,
// in place on base; within two ulps of the output dtype (Exp's error and one rounding).
namespace {
TEST(SigmoidGatedAdd, CloseToFloat64) {
  for (int64_t C : {1, 7, 64, 1000}) {
    const int64_t R = 5;
    for (int64_t G : {int64_t{1}, C}) {
      for (vt::DType dt : {vt::DType::kF32, vt::DType::kBF16, vt::DType::kF16}) {
        std::mt19937 rng(static_cast<uint32_t>(C * 7 + G));
        std::normal_distribution<float> nd(0.0f, 4.0f);
        std::vector<float> xv(R * C), bv(R * C), gv(R * G);
        for (float& f : xv) f = nd(rng);
        for (float& f : bv) f = nd(rng);
        for (float& f : gv) f = nd(rng);
        const vt::Tensor x = vt_test::MakeTensor(xv, {R, C}, dt), gate = vt_test::MakeTensor(gv, {R, G}, vt::DType::kF32);
        const vt::Tensor base = vt_test::MakeTensor(bv, {R, C}, dt);
        std::vector<double> want(R * C), want_nobase(R * C);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t c = 0; c < C; ++c) {
            const double s = 1.0 / (1.0 + std::exp(-vt_test::ValueAt(gate, r * G + (G == 1 ? 0 : c))));
            want_nobase[r * C + c] = s * vt_test::ValueAt(x, r * C + c);
            want[r * C + c] = vt_test::ValueAt(base, r * C + c) + want_nobase[r * C + c];
          }
        const vt::Tensor out = vt::Tensor::Empty({R, C}, dt);
        const vt::Queue q = vt_test::QueueFor(vt::CpuIsa::kScalar);
        vt::SigmoidGatedAdd(q, out, x, gate);
        vt::SigmoidGatedAdd(q, base, x, gate, &base);  // in place
        const double ulp = dt == vt::DType::kBF16 ? 0x1p-7 : dt == vt::DType::kF16 ? 0x1p-10 : 0x1p-21;
        int bad = 0;
        for (int64_t i = 0; i < R * C; ++i) {
          for (auto [t, w] : {std::pair{&out, want_nobase[i]}, std::pair{&base, want[i]}}) {
            const double got = vt_test::ValueAt(*t, i);
            if (!(std::fabs(got - w) <= 2 * ulp * std::fabs(w) + 1e-6) && bad++ < 3)
              ADD_FAILURE() << "C=" << C << " G=" << G << " " << vt_test::Name(dt) << ": element " << i << " got "
                            << got << " want " << w;
          }
        }
      }
    }
  }
}

TEST(SigmoidGatedAdd, RefusesAGateOfAnotherWidth) {
  const vt::Queue q = vt::Queue::Cpu(1);
  const vt::Tensor x = vt::Tensor::Empty({2, 8}, vt::DType::kF32), out = vt::Tensor::Empty({2, 8}, vt::DType::kF32);
  const vt::Tensor gate = vt::Tensor::Empty({2, 4}, vt::DType::kF32);
  try {
    vt::SigmoidGatedAdd(q, out, x, gate);
    FAIL() << "no error";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate"), std::string::npos) << e.what();
  }
}
}  // namespace
