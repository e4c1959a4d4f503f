// MoE ops against float64 references written here from the math (not from the kernels):
// softmax over all experts, the k largest with ties to the lower index, renormalisation;
// every expert's SwiGLU computed densely for every token and combined with the routing
// weights. Also: a token's bytes do not depend on the other tokens of the call (on every
// CPU ISA level), FP8 experts against an emulation, and the errors a caller can act on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "elementwise_test_util.h"
#include "matmul_test_util.h"
#include "vt/cpu/matmul/rows.h"
#include "vt/detail/numerics.h"
#include "vt/vt.h"

namespace {

using vt::DType;
using vt::Tensor;

using vt_test::Gaussian;

// ---- the float64 definitions ----------------------------------------------------------

struct Routed {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

// softmax over E, the k largest (stable: equal values keep index order), renormalised or not.
Routed RouteRef(const std::vector<float>& logits, int64_t T, int64_t E, int64_t k, bool renorm) {
  Routed r;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data() + t * E;
    const double m = *std::max_element(l, l + E);
    std::vector<double> p(static_cast<size_t>(E));
    double s = 0;
    for (int64_t i = 0; i < E; ++i) s += (p[i] = std::exp(double(l[i]) - m));
    for (double& x : p) x /= s;
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      r.ids.push_back(order[j]);
      r.weights.push_back(renorm ? p[order[j]] / sum : p[order[j]]);
    }
  }
  return r;
}

struct Experts {
  int64_t E, H, I;
  std::vector<float> w13, w2;  // [E*2I, H], [E*H, I] as the kernels see them (BF16-rounded)
};

// Every expert's SwiGLU of x (length H) in float64: y[e][h], and its magnitude
// ya[e][h] = Σ_i |a_i · w_down[h, i]| (what rounding errors of the a_i scale with).
std::vector<std::vector<double>> AllExperts(const Experts& ex, const float* x,
                                            std::vector<std::vector<double>>* ya = nullptr) {
  std::vector<std::vector<double>> y(static_cast<size_t>(ex.E), std::vector<double>(static_cast<size_t>(ex.H)));
  if (ya) *ya = y;
  for (int64_t e = 0; e < ex.E; ++e) {
    std::vector<double> a(static_cast<size_t>(ex.I));
    for (int64_t i = 0; i < ex.I; ++i) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < ex.H; ++c) {
        g += double(x[c]) * ex.w13[(e * 2 * ex.I + i) * ex.H + c];
        u += double(x[c]) * ex.w13[(e * 2 * ex.I + ex.I + i) * ex.H + c];
      }
      a[i] = g / (1 + std::exp(-g)) * u;
    }
    for (int64_t h = 0; h < ex.H; ++h) {
      double s = 0, m = 0;
      for (int64_t i = 0; i < ex.I; ++i) {
        s += a[i] * ex.w2[(e * ex.H + h) * ex.I + i];
        m += std::fabs(a[i] * ex.w2[(e * ex.H + h) * ex.I + i]);
      }
      y[e][h] = s;
      if (ya) (*ya)[e][h] = m;
    }
  }
  return y;
}

// The MoE output of every token from its routing, with the magnitude Σ_j |w_j| Σ_i |a_i·w_down|.
void MoeRef(const Experts& ex, const std::vector<float>& x, int64_t T, int64_t k, const Routed& r,
            std::vector<double>& out, std::vector<double>& mag) {
  out.assign(static_cast<size_t>(T * ex.H), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<std::vector<double>> ya;
    const auto y = AllExperts(ex, x.data() + t * ex.H, &ya);
    for (int64_t j = 0; j < k; ++j)
      for (int64_t h = 0; h < ex.H; ++h) {
        out[t * ex.H + h] += r.weights[t * k + j] * y[r.ids[t * k + j]][h];
        mag[t * ex.H + h] += std::fabs(r.weights[t * k + j]) * ya[r.ids[t * k + j]][h];
      }
  }
}

Experts RandomExperts(int64_t E, int64_t H, int64_t I, uint32_t seed) {
  Experts ex{E, H, I, Gaussian(E * 2 * I * H, seed, 1.0f / std::sqrt(float(H))),
             Gaussian(E * H * I, seed + 1, 1.0f / std::sqrt(float(I)))};
  for (float& v : ex.w13) v = vt::numerics::Bf16Round(v);
  for (float& v : ex.w2) v = vt::numerics::Bf16Round(v);
  return ex;
}

Tensor Bf16(const std::vector<float>& v, const vt::Shape& s) { return vt_test::MakeTensor(v, s, DType::kBF16); }
Tensor F32(const std::vector<float>& v, const vt::Shape& s) { return vt_test::MakeTensor(v, s, DType::kF32); }

std::vector<float> ToFloats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(vt_test::ValueAt(t, i));
  return v;
}

// ---- routing --------------------------------------------------------------------------

TEST(MoeTopKRouting, MatchesFloat64SoftmaxTopKOnEveryIsa) {
  const int64_t T = 37, E = 64, k = 8;
  const std::vector<float> logits = Gaussian(T * E, 5, 1.5f);
  for (bool renorm : {true, false}) {
    const Routed want = RouteRef(logits, T, E, k, renorm);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      const vt::Queue q = vt_test::QueueFor(isa);
      Tensor ids = Tensor::Empty({T, k}, DType::kI32), w = Tensor::Empty({T, k}, DType::kF32);
      vt::MoeTopKRouting(q, ids, w, F32(logits, {T, E}), renorm);
      for (int64_t i = 0; i < T * k; ++i) {
        ASSERT_EQ(ids.data_as<int32_t>()[i], want.ids[i]) << vt::CpuIsaName(isa) << " element " << i;
        // f32 sums of E (and k) terms in order: within (E + k + 4) roundings of the value.
        EXPECT_NEAR(w.data_as<float>()[i], want.weights[i], (E + k + 4) * FLT_EPSILON * want.weights[i] + 1e-9)
            << vt::CpuIsaName(isa) << " renormalize " << renorm << " element " << i;
      }
    }
  }
}

TEST(MoeTopKRouting, RenormalisedWeightsSumToOneAndKeepTheRatios) {
  const int64_t T = 4, E = 16, k = 4;
  const std::vector<float> logits = Gaussian(T * E, 9, 1.0f);
  const vt::Queue q = vt::Queue::Cpu(2);
  Tensor ids = Tensor::Empty({T, k}, DType::kI32), w = Tensor::Empty({T, k}, DType::kF32);
  Tensor ids_raw = Tensor::Empty({T, k}, DType::kI32), w_raw = Tensor::Empty({T, k}, DType::kF32);
  vt::MoeTopKRouting(q, ids, w, F32(logits, {T, E}), true);
  vt::MoeTopKRouting(q, ids_raw, w_raw, F32(logits, {T, E}), false);
  for (int64_t t = 0; t < T; ++t) {
    double s = 0, s_raw = 0;
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(ids.data_as<int32_t>()[t * k + j], ids_raw.data_as<int32_t>()[t * k + j]);
      s += w.data_as<float>()[t * k + j];
      s_raw += w_raw.data_as<float>()[t * k + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-6);
    EXPECT_LT(s_raw, 1.0 - 1e-3);  // the top 4 of 16 do not hold all the mass
  }
}

TEST(MoeTopKRouting, TiesGoToTheLowerIndexFirst) {
  // torch.topk documents no order for tied values; vt fixes the stable one (lower index first).
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f,  //
                                     0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const vt::Queue q = vt::Queue::Cpu(1);
  for (int64_t k : {1, 2, 3, 4}) {
    Tensor ids = Tensor::Empty({2, k}, DType::kI32), w = Tensor::Empty({2, k}, DType::kF32);
    vt::MoeTopKRouting(q, ids, w, F32(logits, {2, 5}), false);
    const std::vector<int32_t> row0 = {1, 2, 4, 3};
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(ids.data_as<int32_t>()[j], row0[j]) << "k=" << k << " slot " << j;
      EXPECT_EQ(ids.data_as<int32_t>()[k + j], j) << "k=" << k << " slot " << j << " of the all-equal row";
      EXPECT_EQ(w.data_as<float>()[k + j], 0.2f);
    }
  }
}

TEST(MoeTopKRouting, ErrorsNameTheArgument) {
  const vt::Queue q = vt::Queue::Cpu(1);
  const Tensor logits = F32(std::vector<float>(8, 0.0f), {2, 4});
  vt_test::ExpectErrorWith([&] {
    vt::MoeTopKRouting(q, Tensor::Empty({2, 5}, DType::kI32), Tensor::Empty({2, 5}, DType::kF32), logits, true);
  }, {"MoeTopKRouting", "k must be in [1, 4]"});
  vt_test::ExpectErrorWith([&] {
    vt::MoeTopKRouting(q, Tensor::Empty({2, 2}, DType::kI64), Tensor::Empty({2, 2}, DType::kF32), logits, true);
  }, {"MoeTopKRouting", "ids"});
}

// ---- experts --------------------------------------------------------------------------

// Routing from random logits, the experts on every ISA level, against the dense float64
// definition. F32 activations: only summation order differs (1e-5 of the magnitude).
TEST(MoeExperts, RoutedExpertsMatchTheDenseFloat64DefinitionOnEveryIsa) {
  const int64_t T = 11, H = 48, I = 24, E = 8, k = 3;
  const Experts ex = RandomExperts(E, H, I, 21);
  const std::vector<float> x = Gaussian(T * H, 22, 1.0f), logits = Gaussian(T * E, 23, 1.0f);
  for (bool renorm : {true, false}) {
    const Routed r = RouteRef(logits, T, E, k, renorm);
    std::vector<double> want, mag;
    MoeRef(ex, x, T, k, r, want, mag);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      const vt::Queue q = vt_test::QueueFor(isa);
      Tensor ids = Tensor::Empty({T, k}, DType::kI32), w = Tensor::Empty({T, k}, DType::kF32);
      vt::MoeTopKRouting(q, ids, w, F32(logits, {T, E}), renorm);
      Tensor out = Tensor::Empty({T, H}, DType::kF32);
      vt::MoeExperts(q, out, F32(x, {T, H}), ids, w, Bf16(ex.w13, {E * 2 * I, H}), Bf16(ex.w2, {E * H, I}));
      int bad = 0;
      for (int64_t i = 0; i < T * H; ++i) {
        const double got = out.data_as<float>()[i];
        if (std::fabs(got - want[i]) > 1e-5 * mag[i] + 1e-7 && bad++ < 5)
          ADD_FAILURE() << vt::CpuIsaName(isa) << " renormalize " << renorm << " output " << i << ": " << got
                        << " vs " << want[i] << " (magnitude " << mag[i] << ")";
      }
      EXPECT_EQ(bad, 0) << vt::CpuIsaName(isa);
    }
  }
}

// BF16 activations round gate/up and the SiLU-mul to BF16 (as the dense MLP does): within a
// BF16 step of the float64 definition's magnitude.
TEST(MoeExperts, Bf16ActivationsStayWithinBf16RoundingOfTheDefinition) {
  const int64_t T = 6, H = 64, I = 32, E = 6, k = 2;
  const Experts ex = RandomExperts(E, H, I, 31);
  std::vector<float> x = Gaussian(T * H, 32, 1.0f);
  for (float& v : x) v = vt::numerics::Bf16Round(v);
  const Routed r = RouteRef(Gaussian(T * E, 33, 1.0f), T, E, k, true);
  std::vector<double> want, mag;
  MoeRef(ex, x, T, k, r, want, mag);
  std::vector<float> wf(r.weights.begin(), r.weights.end());
  const vt::Queue q = vt::Queue::Cpu(2);
  Tensor out = Tensor::Empty({T, H}, DType::kBF16);
  vt::MoeExperts(q, out, Bf16(x, {T, H}), vt::Tensor::FromHost(r.ids.data(), {T, k}, DType::kI32),
                 F32(wf, {T, k}), Bf16(ex.w13, {E * 2 * I, H}), Bf16(ex.w2, {E * H, I}));
  const std::vector<float> got = ToFloats(out);
  for (int64_t i = 0; i < T * H; ++i)
    EXPECT_NEAR(got[i], want[i], 0x1p-6 * mag[i] + std::ldexp(std::fabs(want[i]), -8)) << "output " << i;
}

// The same token gives the same bytes alone, in any position and beside any other tokens.
TEST(MoeExperts, ATokensBytesDoNotDependOnTheOtherTokens) {
  const int64_t T = 9, H = 40, I = 16, E = 8, k = 2;
  const Experts ex = RandomExperts(E, H, I, 41);
  const std::vector<float> x = Gaussian(T * H, 42, 1.0f), logits = Gaussian(T * E, 43, 1.0f);
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    for (DType act : {DType::kF32, DType::kBF16}) {
      const vt::Queue q = vt_test::QueueFor(isa);
      const Tensor w13 = Bf16(ex.w13, {E * 2 * I, H}), w2 = Bf16(ex.w2, {E * H, I});
      auto run = [&](const std::vector<int64_t>& tokens) {
        const int64_t n = static_cast<int64_t>(tokens.size());
        std::vector<float> xs, ls;
        for (int64_t t : tokens) {
          xs.insert(xs.end(), x.begin() + t * H, x.begin() + (t + 1) * H);
          ls.insert(ls.end(), logits.begin() + t * E, logits.begin() + (t + 1) * E);
        }
        Tensor ids = Tensor::Empty({n, k}, DType::kI32), w = Tensor::Empty({n, k}, DType::kF32);
        vt::MoeTopKRouting(q, ids, w, F32(ls, {n, E}), true);
        Tensor out = Tensor::Empty({n, H}, act);
        vt::MoeExperts(q, out, vt_test::MakeTensor(xs, {n, H}, act), ids, w, w13, w2);
        return vt_test::BytesOf(out);
      };
      const size_t row = static_cast<size_t>(H) * vt::DTypeSize(act);
      const std::vector<uint8_t> all = run({0, 1, 2, 3, 4, 5, 6, 7, 8});
      const std::vector<uint8_t> shuffled = run({8, 3, 5, 0, 7, 1, 6, 2, 4, 3});
      const std::vector<int64_t> pos_in_shuffled = {3, 5, 7, 1, 8, 2, 6, 4, 0};
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<uint8_t> alone = run({t});
        const std::vector<uint8_t> in_all(all.begin() + t * row, all.begin() + (t + 1) * row);
        const std::vector<uint8_t> in_sh(shuffled.begin() + pos_in_shuffled[t] * row,
                                         shuffled.begin() + (pos_in_shuffled[t] + 1) * row);
        EXPECT_EQ(vt_test::FirstDiff(alone, in_all), -1) << vt::CpuIsaName(isa) << " token " << t;
        EXPECT_EQ(vt_test::FirstDiff(alone, in_sh), -1) << vt::CpuIsaName(isa) << " token " << t;
      }
    }
  }
}

// Decode batches of mixed tokens that share experts: every token's bytes in batches of 2,
// 5, 16 and 33 tokens (repeats included, each batch also in reverse order) are the bytes it
// gets alone (batch 1), for F32 experts (the stream, with F32 sums to the output), BF16
// experts (F32 activations: the blocked matmul path; BF16: the stream) and FP8 experts (as stored, and prepared as a model prepares them: the
// outer-product kernels), F32 and BF16 outputs, on every ISA level. One expert gets up to
// 28 tokens with H = 1100, past the 16 rows and 1024 K values where plain products of that
// many rows would change path or cut K into blocks. The counter shows that each expert
// with several tokens ran as one product per projection.
TEST(MoeExperts, ATokensBytesInAnyBatchAreItsBytesAloneOnEveryIsa) {
  namespace mm = vt::cpu::matmul;
  const int64_t P = 12, H = 1100, I = 64, E = 6, k = 3;
  // Token t: experts t % 2, 2 + t % 3 and 5 (t % 4 == 0) or the other of 0 and 1.
  std::vector<int32_t> pool_ids;
  for (int64_t t = 0; t < P; ++t) {
    pool_ids.push_back(static_cast<int32_t>(t % 2));
    pool_ids.push_back(static_cast<int32_t>(2 + t % 3));
    pool_ids.push_back(t % 4 == 0 ? 5 : static_cast<int32_t>(1 - t % 2));
  }
  std::vector<float> pool_w = Gaussian(P * k, 71, 0.3f);
  for (float& w : pool_w) w = 0.2f + std::fabs(w);
  const std::vector<float> x = Gaussian(P * H, 72, 1.0f);
  std::mt19937 rng(73);
  std::vector<std::vector<int64_t>> batches;
  for (int64_t n : {2, 5, 16, 33}) {
    std::vector<int64_t> b;
    for (int64_t i = 0; i < n; ++i) b.push_back(i < P ? i : static_cast<int64_t>(rng() % P));
    std::shuffle(b.begin(), b.end(), rng);
    batches.push_back(b);
    batches.emplace_back(b.rbegin(), b.rend());
  }
  const Experts ex = RandomExperts(E, H, I, 74);
  // Every fp8 code but NaN, uniformly: products from 2^-18 to 448², so that the f32 sums
  // round (with codes near one magnitude they are mostly exact, and any order gives the
  // same bits); the alphas bring the sums back near 1.
  std::mt19937 code_rng(75);
  const std::vector<uint8_t> x8 = vt_test::RandomFp8(P * H, code_rng),
                             w13_8 = vt_test::RandomFp8(E * 2 * I * H, code_rng),
                             w2_8 = vt_test::RandomFp8(E * H * I, code_rng);
  const std::vector<float> al13 = {2e-6f, 4e-6f, 1e-6f, 3e-6f, 2e-6f, 5e-6f};
  const std::vector<float> al2 = {6e-6f, 2e-6f, 4e-6f, 8e-6f, 5e-6f, 3e-6f};
  std::vector<int64_t> r13, r2;
  for (int64_t e = 0; e < E; ++e) {
    r13.push_back(e * 2 * I);
    r2.push_back(e * H);
  }
  enum class Kind {
    kF32,  // F32 experts and activations: the stream, F32 sums kept to the output
    kBf16F32Act,
    kBf16Bf16Act,
    kFp8F32Out,
    kFp8Bf16Out,
    kFp8PreparedF32Out,
    kFp8PreparedBf16Out
  };
  int64_t grouped_rows = 0;
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    const Tensor w13 = Bf16(ex.w13, {E * 2 * I, H}), w2 = Bf16(ex.w2, {E * H, I});
    const Tensor w13_f32 = F32(ex.w13, {E * 2 * I, H}), w2_f32 = F32(ex.w2, {E * H, I});
    Tensor w13_raw = Tensor::FromHost(w13_8.data(), {E * 2 * I, H}, DType::kF8E4M3);
    Tensor w2_raw = Tensor::FromHost(w2_8.data(), {E * H, I}, DType::kF8E4M3);
    w13_raw.SetReadOnly();
    w2_raw.SetReadOnly();
    const Tensor w13_prep = vt::PrepareWeight(q, w13_raw, vt::WeightUse::kMatmulB, r13);
    const Tensor w2_prep = vt::PrepareWeight(q, w2_raw, vt::WeightUse::kMatmulB, r2);
    for (Kind kind : {Kind::kF32, Kind::kBf16F32Act, Kind::kBf16Bf16Act, Kind::kFp8F32Out, Kind::kFp8Bf16Out,
                      Kind::kFp8PreparedF32Out, Kind::kFp8PreparedBf16Out}) {
      const bool fp8 = kind != Kind::kF32 && kind != Kind::kBf16F32Act && kind != Kind::kBf16Bf16Act;
      const bool prepared = kind == Kind::kFp8PreparedF32Out || kind == Kind::kFp8PreparedBf16Out;
      const DType act = kind == Kind::kF32 || kind == Kind::kBf16F32Act || kind == Kind::kFp8F32Out ||
                                kind == Kind::kFp8PreparedF32Out
                            ? DType::kF32
                            : DType::kBF16;
      const std::string what = std::string(vt::CpuIsaName(isa)) + " kind " + std::to_string(static_cast<int>(kind));
      auto run = [&](const std::vector<int64_t>& tokens) {
        const int64_t n = static_cast<int64_t>(tokens.size());
        std::vector<float> xs, ws;
        std::vector<int32_t> ids;
        std::vector<uint8_t> xs8;
        std::vector<int64_t> count(static_cast<size_t>(E), 0);
        for (int64_t t : tokens) {
          xs.insert(xs.end(), x.begin() + t * H, x.begin() + (t + 1) * H);
          xs8.insert(xs8.end(), x8.begin() + t * H, x8.begin() + (t + 1) * H);
          ids.insert(ids.end(), pool_ids.begin() + t * k, pool_ids.begin() + (t + 1) * k);
          ws.insert(ws.end(), pool_w.begin() + t * k, pool_w.begin() + (t + 1) * k);
          for (int64_t j = 0; j < k; ++j) ++count[pool_ids[t * k + j]];
        }
        int64_t shared = 0;
        for (int64_t c : count) shared += c > 1;
        const Tensor tid = Tensor::FromHost(ids.data(), {n, k}, DType::kI32);
        Tensor out = Tensor::Empty({n, H}, act);
        const int64_t calls = mm::RowsAsOneCalls();
        if (!fp8) {
          vt::MoeExperts(q, out, vt_test::MakeTensor(xs, {n, H}, act), tid, F32(ws, {n, k}),
                         kind == Kind::kF32 ? w13_f32 : w13, kind == Kind::kF32 ? w2_f32 : w2);
        } else {
          vt::MoeExpertsFp8(q, out, Tensor::FromHost(xs8.data(), {n, H}, DType::kF8E4M3), tid, F32(ws, {n, k}),
                            prepared ? w13_prep : w13_raw, F32(al13, {E}), prepared ? w2_prep : w2_raw, 0.05f,
                            F32(al2, {E}));
        }
        // Two grouped products (gate/up, down) per expert with several tokens; the scalar
        // level runs the reference loops.
        EXPECT_EQ(mm::RowsAsOneCalls() - calls, isa == vt::CpuIsa::kScalar ? 0 : 2 * shared) << what;
        if (isa != vt::CpuIsa::kScalar)
          for (int64_t c : count) grouped_rows += c > 1 ? c : 0;
        return vt_test::BytesOf(out);
      };
      std::vector<std::vector<uint8_t>> alone;
      for (int64_t t = 0; t < P; ++t) alone.push_back(run({t}));
      const size_t row = static_cast<size_t>(H) * vt::DTypeSize(act);
      for (const std::vector<int64_t>& b : batches) {
        const std::vector<uint8_t> got = run(b);
        for (size_t i = 0; i < b.size(); ++i) {
          const std::vector<uint8_t> in_batch(got.begin() + i * row, got.begin() + (i + 1) * row);
          EXPECT_EQ(vt_test::FirstDiff(alone[b[i]], in_batch), -1)
              << what << " batch of " << b.size() << ": token " << b[i] << " at " << i;
        }
      }
    }
  }
  std::printf("[ levels %s; %lld rows went through grouped expert products ]\n", vt_test::IsaNames().c_str(),
              static_cast<long long>(grouped_rows));
  if (vt_test::IsaLevels().size() > 1) {
    EXPECT_GT(grouped_rows, 0);
  }
}

TEST(MoeExperts, AnExpertIdOutOfRangeIsAnError) {
  const int64_t H = 8, I = 4, E = 3;
  const Experts ex = RandomExperts(E, H, I, 51);
  const std::vector<int32_t> ids = {0, 3};
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    Tensor out = Tensor::Empty({1, H}, DType::kF32);
    vt_test::ExpectErrorWith([&] {
      vt::MoeExperts(q, out, F32(std::vector<float>(H, 1.0f), {1, H}), Tensor::FromHost(ids.data(), {1, 2}, DType::kI32),
                     F32({0.5f, 0.5f}, {1, 2}), Bf16(ex.w13, {E * 2 * I, H}), Bf16(ex.w2, {E * H, I}));
    }, {"expert id 3", "[0, 3)"});
  }
  const vt::Queue q = vt::Queue::Cpu(1);
  vt_test::ExpectErrorWith([&] {
    vt::MoeExperts(q, Tensor::Empty({1, H}, DType::kF32), F32(std::vector<float>(H, 1.0f), {1, H}),
                   Tensor::FromHost(ids.data(), {1, 2}, DType::kI32), F32({0.5f, 0.5f}, {1, 2}),
                   Bf16(ex.w13, {E * 2 * I, H}), Bf16(std::vector<float>(E * H * I - H * I), {(E - 1) * H, I}));
  }, {"MoeExperts", "w_down", "[24, 4]"});
}

// FP8 experts against an emulation of the W8A8 recipe in float64: the fp8 GEMMs exact in
// float64, per-expert alphas, the SiLU-mul quantized with the shared down input scale.
// Rounding points of the emulation (F32 out) are the same as the op's; only the sums' order
// differs, which can move an e4m3fn code by a step in rare elements: 2^-5 of the magnitude.
TEST(MoeExpertsFp8, MatchesTheW8A8EmulationWithPerExpertScales) {
  const int64_t T = 7, H = 32, I = 16, E = 4, k = 2;
  std::mt19937 rng(61);
  auto codes = [&](size_t n) {
    std::vector<uint8_t> c(n);
    const std::vector<float> g = Gaussian(n, rng(), 1.0f);
    for (size_t i = 0; i < n; ++i) c[i] = vt::numerics::QuantizeFp8(g[i], 1.0f);
    return c;
  };
  const std::vector<uint8_t> x8 = codes(T * H), w13 = codes(E * 2 * I * H), w2 = codes(E * H * I);
  const std::vector<float> al13 = {0.02f, 0.05f, 0.01f, 0.03f}, al2 = {0.06f, 0.02f, 0.04f, 0.08f};
  const float down_scale = 0.02f;
  const Routed r = RouteRef(Gaussian(T * E, 62, 1.0f), T, E, k, true);
  std::vector<float> wf(r.weights.begin(), r.weights.end());
  auto dec = [](uint8_t c) { return vt_test::DecodeE4M3(c); };
  std::vector<double> want(static_cast<size_t>(T * H), 0.0), mag(want.size(), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = r.ids[t * k + j];
      std::vector<double> a(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < H; ++c) {
          g += dec(x8[t * H + c]) * dec(w13[(e * 2 * I + i) * H + c]);
          u += dec(x8[t * H + c]) * dec(w13[(e * 2 * I + I + i) * H + c]);
        }
        const float gf = static_cast<float>(al13[e] * g), uf = static_cast<float>(al13[e] * u);
        a[i] = dec(vt_test::QuantRef(vt::numerics::Silu(gf) * uf, 1.0f / down_scale));
      }
      for (int64_t h = 0; h < H; ++h) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < I; ++i) {
          s += a[i] * dec(w2[(e * H + h) * I + i]);
          m += std::fabs(a[i] * dec(w2[(e * H + h) * I + i]));
        }
        want[t * H + h] += r.weights[t * k + j] * al2[e] * s;
        mag[t * H + h] += r.weights[t * k + j] * al2[e] * m;
      }
    }
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    Tensor out = Tensor::Empty({T, H}, DType::kF32);
    vt::MoeExpertsFp8(q, out, Tensor::FromHost(x8.data(), {T, H}, DType::kF8E4M3),
                      Tensor::FromHost(r.ids.data(), {T, k}, DType::kI32), F32(wf, {T, k}),
                      Tensor::FromHost(w13.data(), {E * 2 * I, H}, DType::kF8E4M3), F32(al13, {E}),
                      Tensor::FromHost(w2.data(), {E * H, I}, DType::kF8E4M3), down_scale, F32(al2, {E}));
    int bad = 0;
    for (int64_t i = 0; i < T * H; ++i) {
      const double got = out.data_as<float>()[i];
      if (std::fabs(got - want[i]) > 0x1p-5 * mag[i] + 1e-6 && bad++ < 5)
        ADD_FAILURE() << vt::CpuIsaName(isa) << " output " << i << ": " << got << " vs " << want[i];
    }
    EXPECT_EQ(bad, 0) << vt::CpuIsaName(isa);
  }
}

}  // namespace
