// Each fused recipe kernel is byte-identical to FusedChainComposite (the recipe's
// definition), on every CPU ISA level, for odd widths and tails, with and without the
// residual and the BF16 side output; and every ISA's composite equals the scalar one.
#include <gtest/gtest.h>

#include <random>

#include "elementwise_test_util.h"

namespace {

const int64_t kWidths[] = {1, 3, 17, 31, 32, 33, 100, 1000, 1023, 4097};
const vt::DType kDTypes[] = {vt::DType::kF32, vt::DType::kBF16, vt::DType::kF16};

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

int64_t RowsFor(int64_t width) { return width >= 1000 ? 3 : 5; }

// Outputs of one run, as bytes.
struct Result {
  std::vector<uint8_t> q, normed, residual;
};

void ExpectSame(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(vt_test::FirstDiff(a.q, b.q), -1) << what << ": fp8 bytes differ";
  EXPECT_EQ(vt_test::FirstDiff(a.normed, b.normed), -1) << what << ": BF16 side output differs";
  EXPECT_EQ(vt_test::FirstDiff(a.residual, b.residual), -1) << what << ": updated residual differs";
}

TEST(FusedRecipes, RmsNormQuantFp8MatchesComposite) {
  std::cout << "[ ISA levels: " << vt_test::IsaNames() << " ]\n";
  const float scale = 0.021f;
  for (int64_t H : kWidths) {
    const int64_t R = RowsFor(H);
    for (vt::DType dt : kDTypes) {
      vt::Tensor x = vt_test::MakeTensor(Random(R * H, H, 1.5f), {R, H}, dt);
      vt::Tensor w = vt_test::MakeTensor(Random(H, H + 1, 1.0f), {H}, dt);
      vt::Tensor res0 = vt_test::MakeTensor(Random(R * H, H + 2, 2.0f), {R, H}, dt);
      for (bool with_res : {false, true}) {
        for (bool with_normed : {false, true}) {
          auto run = [&](const vt::Queue& q, bool fused) {
            vt::Tensor out = vt::Tensor::Empty({R, H}, vt::DType::kF8E4M3);
            vt::Tensor normed = vt::Tensor::Empty({R, H}, vt::DType::kBF16);
            vt::Tensor res = vt_test::Clone(res0);
            if (fused) {
              vt::RmsNormQuantFp8(q, out, x, w, 1e-6f, scale, with_res ? &res : nullptr,
                                  with_normed ? &normed : nullptr);
            } else {
              vt::FusedArgs args;
              args.out = out;
              args.x = x;
              args.weight = w;
              if (with_res) args.residual = res;
              if (with_normed) args.normed_out = normed;
              args.eps = 1e-6f;
              args.input_scale = scale;
              vt::FusedChainComposite(q, vt::recipes::kRmsNormQuantFp8, args);
            }
            return Result{vt_test::BytesOf(out), with_normed ? vt_test::BytesOf(normed) : std::vector<uint8_t>{},
                          vt_test::BytesOf(res)};
          };
          const Result scalar = run(vt::Queue::Cpu(2, vt::CpuIsa::kScalar), false);
          for (vt::CpuIsa isa : vt_test::IsaLevels()) {
            vt::Queue q = vt_test::QueueFor(isa);
            const std::string what = std::string("H=") + std::to_string(H) + " " + vt_test::Name(dt) +
                                     (with_res ? " +residual" : "") + (with_normed ? " +normed_out" : "") + " on " +
                                     vt::CpuIsaName(isa);
            ExpectSame(run(q, true), scalar, what + " fused vs scalar composite");
            ExpectSame(run(q, false), scalar, what + " composite vs scalar composite");
          }
        }
      }
    }
  }
}

TEST(FusedRecipes, RmsNormGatedQuantFp8MatchesComposite) {
  const float scale = 0.0092f;
  for (int64_t H : kWidths) {
    const int64_t R = RowsFor(H);
    for (vt::DType dt : kDTypes) {
      vt::Tensor x = vt_test::MakeTensor(Random(R * H, H + 3, 1.0f), {R, H}, dt);
      vt::Tensor gate = vt_test::MakeTensor(Random(R * H, H + 4, 4.0f), {R, H}, dt);
      vt::Tensor w = vt_test::MakeTensor(Random(H, H + 5, 1.0f), {H}, dt);
      auto run = [&](const vt::Queue& q, bool fused) {
        vt::Tensor out = vt::Tensor::Empty({R, H}, vt::DType::kF8E4M3);
        if (fused) {
          vt::RmsNormGatedQuantFp8(q, out, x, gate, w, 1e-5f, scale);
        } else {
          vt::FusedArgs args;
          args.out = out;
          args.x = x;
          args.gate = gate;
          args.weight = w;
          args.eps = 1e-5f;
          args.input_scale = scale;
          vt::FusedChainComposite(q, vt::recipes::kRmsNormGatedQuantFp8, args);
        }
        return Result{vt_test::BytesOf(out), {}, {}};
      };
      const Result scalar = run(vt::Queue::Cpu(2, vt::CpuIsa::kScalar), false);
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
        vt::Queue q = vt_test::QueueFor(isa);
        const std::string what =
            std::string("H=") + std::to_string(H) + " " + vt_test::Name(dt) + " on " + vt::CpuIsaName(isa);
        ExpectSame(run(q, true), scalar, what + " fused vs scalar composite");
        ExpectSame(run(q, false), scalar, what + " composite vs scalar composite");
      }
    }
  }
}

TEST(FusedRecipes, SiluMulQuantFp8MatchesComposite) {
  const float scale = 0.13f;
  for (int64_t I : kWidths) {
    const int64_t R = RowsFor(I);
    for (vt::DType dt : kDTypes) {
      // Wide gate values exercise Exp's range limits (overflow, underflow) and NaN/Inf.
      std::vector<float> v = Random(R * 2 * I, I + 6, 6.0f);
      if (v.size() > 8) {
        v[1] = 120.0f;
        v[2] = -120.0f;
        v[3] = std::numeric_limits<float>::infinity();
        v[5] = std::nanf("");
        v[7] = -90.0f;
      }
      vt::Tensor x = vt_test::MakeTensor(v, {R, 2 * I}, dt);
      auto run = [&](const vt::Queue& q, bool fused) {
        vt::Tensor out = vt::Tensor::Empty({R, I}, vt::DType::kF8E4M3);
        if (fused) {
          vt::SiluMulQuantFp8(q, out, x, scale);
        } else {
          vt::FusedArgs args;
          args.out = out;
          args.x = x;
          args.input_scale = scale;
          vt::FusedChainComposite(q, vt::recipes::kSiluMulQuantFp8, args);
        }
        return Result{vt_test::BytesOf(out), {}, {}};
      };
      const Result scalar = run(vt::Queue::Cpu(2, vt::CpuIsa::kScalar), false);
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
        vt::Queue q = vt_test::QueueFor(isa);
        const std::string what =
            std::string("I=") + std::to_string(I) + " " + vt_test::Name(dt) + " on " + vt::CpuIsaName(isa);
        ExpectSame(run(q, true), scalar, what + " fused vs scalar composite");
        ExpectSame(run(q, false), scalar, what + " composite vs scalar composite");
      }
    }
  }
}

}  // namespace
