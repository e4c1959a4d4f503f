// MoeExpertsFp8PerToken (vt/ops/moe.h) against a float64 emulation written here from the
// op's definition: x quantized per token in the test (amax / 448 with the per-token floor,
// x / s to the nearest e4m3fn code by enumerating the grid), the fp8 GEMMs exact in float64,
// each (token, expert) row of Silu(g) * u quantized with its own scale, the expert's weight
// scales. Also: a token's bytes do not depend on its batch, and the errors name the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "elementwise_test_util.h"
#include "matmul_test_util.h"
#include "vt/detail/numerics.h"
#include "vt/vt.h"

namespace {

using vt::DType;
using vt::Tensor;

constexpr double kScaleFloor = 1.0 / (448.0 * 512.0);

using vt_test::Gaussian;

Tensor F32(const std::vector<float>& v, const vt::Shape& s) { return vt_test::MakeTensor(v, s, DType::kF32); }

// A row's per-token quantization from the definition: s = max(f32(amax / 448), floor), each
// code the e4m3fn value nearest to f32(x / s) (saturating); returns s.
float QuantizeRowRef(const float* x, int64_t n, uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = std::max(static_cast<float>(static_cast<double>(amax) / 448.0), static_cast<float>(kScaleFloor));
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<float>(static_cast<double>(x[i]) / s);
    codes[i] = vt_test::NearestE4M3(std::clamp(p, -448.0, 448.0));
  }
  return s;
}

struct Case {
  int64_t T, H, I, E, k;
  std::vector<uint8_t> x8, w13, w2;
  std::vector<float> sx, ws13, ws2, weights;
  std::vector<int32_t> ids;
};

// Tokens of N(0, 1) scaled per token by 2^(t mod 5 - 2) (so the scales differ), quantized
// per token here; weights as codes of N(0, 1), expert scales around 1 / sqrt(K).
Case MakeCase(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, uint32_t seed) {
  Case c{T, H, I, E, k, {}, {}, {}, {}, {}, {}, {}, {}};
  std::vector<float> x = Gaussian(T * H, seed, 1.0f);
  c.x8.resize(static_cast<size_t>(T * H));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) x[t * H + h] = std::ldexp(x[t * H + h], static_cast<int>(t % 5) - 2);
    c.sx.push_back(QuantizeRowRef(x.data() + t * H, H, c.x8.data() + t * H));
  }
  auto codes = [](size_t n, uint32_t s) {
    std::vector<uint8_t> v(n);
    const std::vector<float> g = Gaussian(n, s, 1.0f);
    for (size_t i = 0; i < n; ++i) v[i] = vt::numerics::QuantizeFp8(g[i], 1.0f);
    return v;
  };
  c.w13 = codes(E * 2 * I * H, seed + 1);
  c.w2 = codes(E * H * I, seed + 2);
  std::mt19937 rng(seed + 3);
  for (int64_t e = 0; e < E; ++e) {
    c.ws13.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / std::sqrt(float(H)));
    c.ws2.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / std::sqrt(float(I)));
  }
  vt_test::RandomRouting(T, E, k, rng, c.ids, c.weights);
  return c;
}

// The op's output in float64 with F32 activations (the rounding points of the definition:
// g and u, then Silu(g) * u, rounded to f32), and each output's magnitude
// Σ_j |w_j| Σ_i |a_i · w_down[h, i]|.
void Emulate(const Case& c, std::vector<double>& out, std::vector<double>& mag) {
  const int64_t H = c.H, I = c.I, k = c.k;
  auto dec = [](uint8_t b) { return vt_test::DecodeE4M3(b); };
  out.assign(static_cast<size_t>(c.T * H), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = c.ids[t * k + j];
      std::vector<float> a(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += dec(c.x8[t * H + h]) * dec(c.w13[(e * 2 * I + i) * H + h]);
          u += dec(c.x8[t * H + h]) * dec(c.w13[(e * 2 * I + I + i) * H + h]);
        }
        const double sc = double(c.sx[t]) * c.ws13[e];
        const float gf = static_cast<float>(g * sc), uf = static_cast<float>(u * sc);
        a[i] = static_cast<float>(gf / (1.0 + std::exp(-double(gf))) * uf);
      }
      std::vector<uint8_t> a8(static_cast<size_t>(I));
      const double sa = QuantizeRowRef(a.data(), I, a8.data());
      for (int64_t h = 0; h < H; ++h) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < I; ++i) {
          s += dec(a8[i]) * dec(c.w2[(e * H + h) * I + i]);
          m += std::fabs(double(a[i]) * dec(c.w2[(e * H + h) * I + i]));
        }
        out[t * H + h] += c.weights[t * k + j] * sa * c.ws2[e] * s;
        mag[t * H + h] += c.weights[t * k + j] * c.ws2[e] * m;
      }
    }
}

Tensor RunOp(const vt::Queue& q, const Case& c, DType out_dtype, bool prepared) {
  Tensor w13 = Tensor::FromHost(c.w13.data(), {c.E * 2 * c.I, c.H}, DType::kF8E4M3);
  Tensor w2 = Tensor::FromHost(c.w2.data(), {c.E * c.H, c.I}, DType::kF8E4M3);
  if (prepared) {  // as the model keeps them on a CPU: each expert's rows laid out for the kernels
    std::vector<int64_t> r13, r2;
    for (int64_t e = 0; e < c.E; ++e) {
      r13.push_back(e * 2 * c.I);
      r2.push_back(e * c.H);
    }
    w13.SetReadOnly();
    w2.SetReadOnly();
    w13 = vt::PrepareWeight(q, w13, vt::WeightUse::kMatmulB, r13);
    w2 = vt::PrepareWeight(q, w2, vt::WeightUse::kMatmulB, r2);
  }
  Tensor out = Tensor::Empty({c.T, c.H}, out_dtype);
  vt::MoeExpertsFp8PerToken(q, out, Tensor::FromHost(c.x8.data(), {c.T, c.H}, DType::kF8E4M3), F32(c.sx, {c.T, 1}),
                            Tensor::FromHost(c.ids.data(), {c.T, c.k}, DType::kI32), F32(c.weights, {c.T, c.k}), w13,
                            F32(c.ws13, {c.E}), w2, F32(c.ws2, {c.E}));
  q.Synchronize();
  return out;
}

// Same rounding points as the emulation (F32 out), only the order of the f32 sums differs:
// a rare element whose g, u or a sits next to an e4m3fn boundary moves by a code step (2^-5
// of its magnitude); the rest agree to 1e-4 of theirs.
TEST(MoeExpertsFp8PerToken, MatchesTheFloat64EmulationOnEveryIsa) {
  const Case c = MakeCase(11, 72, 40, 6, 2, 81);
  std::vector<double> want, mag;
  Emulate(c, want, mag);
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    for (bool prepared : {false, true}) {
      const Tensor out = RunOp(vt_test::QueueFor(isa), c, DType::kF32, prepared);
      int bad = 0, loose = 0;
      for (int64_t i = 0; i < c.T * c.H; ++i) {
        const double err = std::fabs(out.data_as<float>()[i] - want[i]);
        loose += err > 1e-4 * mag[i] + 1e-7;
        if (err > 0x1p-5 * mag[i] + 1e-7 && bad++ < 5)
          ADD_FAILURE() << vt::CpuIsaName(isa) << (prepared ? " prepared" : "") << " output " << i << ": "
                        << out.data_as<float>()[i] << " vs " << want[i] << " (magnitude " << mag[i] << ")";
      }
      EXPECT_EQ(bad, 0) << vt::CpuIsaName(isa);
      EXPECT_LE(loose, c.T * c.H / 50) << vt::CpuIsaName(isa) << ": outputs off by more than summation order";
    }
  }
}

// Every (token, expert) row of Silu(g) * u has its own scale: an expert whose tokens differ
// in size by 2^4 gives the small token the resolution it gets alone. A token's bytes in any
// batch (shared experts, repeats, any order) are its bytes alone, on every ISA level, for
// F32 and BF16 outputs and prepared weights.
TEST(MoeExpertsFp8PerToken, ATokensBytesInAnyBatchAreItsBytesAloneOnEveryIsa) {
  const Case pool = MakeCase(10, 136, 48, 4, 2, 91);
  std::mt19937 rng(92);
  std::vector<std::vector<int64_t>> batches;
  for (int64_t n : {2, 7, 19}) {
    std::vector<int64_t> b;
    for (int64_t i = 0; i < n; ++i) b.push_back(i < pool.T ? i : static_cast<int64_t>(rng() % pool.T));
    std::shuffle(b.begin(), b.end(), rng);
    batches.push_back(b);
  }
  auto subset = [&](const std::vector<int64_t>& tokens) {
    Case c = pool;
    c.T = static_cast<int64_t>(tokens.size());
    c.x8.clear(), c.sx.clear(), c.ids.clear(), c.weights.clear();
    for (int64_t t : tokens) {
      c.x8.insert(c.x8.end(), pool.x8.begin() + t * pool.H, pool.x8.begin() + (t + 1) * pool.H);
      c.sx.push_back(pool.sx[t]);
      c.ids.insert(c.ids.end(), pool.ids.begin() + t * pool.k, pool.ids.begin() + (t + 1) * pool.k);
      c.weights.insert(c.weights.end(), pool.weights.begin() + t * pool.k, pool.weights.begin() + (t + 1) * pool.k);
    }
    return c;
  };
  for (vt::CpuIsa isa : vt_test::IsaLevels())
    for (DType out : {DType::kF32, DType::kBF16})
      for (bool prepared : {false, true}) {
        const vt::Queue q = vt_test::QueueFor(isa);
        const size_t row = static_cast<size_t>(pool.H) * vt::DTypeSize(out);
        std::vector<std::vector<uint8_t>> alone;
        for (int64_t t = 0; t < pool.T; ++t) alone.push_back(vt_test::BytesOf(RunOp(q, subset({t}), out, prepared)));
        for (const std::vector<int64_t>& b : batches) {
          const std::vector<uint8_t> got = vt_test::BytesOf(RunOp(q, subset(b), out, prepared));
          for (size_t i = 0; i < b.size(); ++i) {
            const std::vector<uint8_t> in_batch(got.begin() + i * row, got.begin() + (i + 1) * row);
            EXPECT_EQ(vt_test::FirstDiff(alone[b[i]], in_batch), -1)
                << vt::CpuIsaName(isa) << " " << vt::DTypeName(out) << (prepared ? " prepared" : "") << " batch of "
                << b.size() << ": token " << b[i] << " at " << i;
          }
        }
      }
}

TEST(MoeExpertsFp8PerToken, ErrorsNameTheArgument) {
  const Case c = MakeCase(3, 16, 8, 4, 2, 7);
  const vt::Queue q = vt::Queue::Cpu(1);
  const Tensor x8 = Tensor::FromHost(c.x8.data(), {c.T, c.H}, DType::kF8E4M3);
  const Tensor ids = Tensor::FromHost(c.ids.data(), {c.T, c.k}, DType::kI32);
  const Tensor w13 = Tensor::FromHost(c.w13.data(), {c.E * 2 * c.I, c.H}, DType::kF8E4M3);
  const Tensor w2 = Tensor::FromHost(c.w2.data(), {c.E * c.H, c.I}, DType::kF8E4M3);
  Tensor out = Tensor::Empty({c.T, c.H}, DType::kF32);
  vt_test::ExpectErrorWith([&] {
    vt::MoeExpertsFp8PerToken(q, out, x8, F32(c.sx, {c.T}), ids, F32(c.weights, {c.T, c.k}), w13,
                              F32(c.ws13, {c.E}), w2, F32(c.ws2, {c.E}));
  }, {"MoeExpertsFp8PerToken", "x_scales", "[3, 1]"});
  vt_test::ExpectErrorWith([&] {
    vt::MoeExpertsFp8PerToken(q, out, x8, F32(c.sx, {c.T, 1}), ids, F32(c.weights, {c.T, c.k}), w13,
                              F32(std::vector<float>(3, 1.0f), {3}), w2, F32(c.ws2, {c.E}));
  }, {"MoeExpertsFp8PerToken", "w_scale_gate_up", "[4]"});
  std::vector<int32_t> bad_ids = c.ids;
  bad_ids[3] = 4;
  for (vt::CpuIsa isa : vt_test::IsaLevels())
    vt_test::ExpectErrorWith([&] {
      vt::MoeExpertsFp8PerToken(vt_test::QueueFor(isa), out, x8, F32(c.sx, {c.T, 1}),
                                Tensor::FromHost(bad_ids.data(), {c.T, c.k}, DType::kI32), F32(c.weights, {c.T, c.k}),
                                w13, F32(c.ws13, {c.E}), w2, F32(c.ws2, {c.E}));
    }, {"expert id 4", "[0, 4)"});
}

}  // namespace
