// Table cases of the MoE ops. MoeTopKRouting is defined with IEEE-exact operations in a fixed
// order (vt/ops/moe.h): byte-exact, ties included. The expert ops sum GEMMs in another order
// per backend and round their intermediates to the activation dtype (and, in FP8, to e4m3fn),
// where a different sum may land on the other side of a rounding boundary; their tolerance
// is a share of each output's magnitude Σ_j |w_j| Σ_i |w_down[h, i] · a_i| (a = silu(g)·u in
// float64): 16·(H + I)·FLT_EPSILON of it with F32 activations, 2^-6 with BF16 ones (an
// intermediate one BF16 step off), 2^-5 in FP8 (a rare e4m3fn step, 2^-3 of one term),
// plus two units of the output dtype. moe_test.cpp and moe_fp8_per_token_test.cpp hold the
// float64 references.
#include <cfloat>
#include <cmath>
#include <random>

#include "op_table.h"
#include "vt/detail/numerics.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"

namespace vt_table {

namespace {

using vt::DType;

struct MoeShape {
  int64_t T, H, I, E, k;
};
const MoeShape kMoeShapes[] = {{1, 16, 8, 4, 2}, {5, 33, 12, 6, 3}, {9, 64, 40, 8, 2}, {3, 24, 16, 5, 5}};
// The FP8 expert ops also take these: few tokens (up to 16), H and I in whole 16-byte vectors,
// which the CUDA backend runs through its down GEMV (moe_gemv.cuh); the last has the
// expert width of Qwen3-30B-A3B (I = 768, k = 8: 384-thread down CTAs).
const MoeShape kMoeFp8Shapes[] = {{1, 16, 8, 4, 2},    {5, 33, 12, 6, 3},     {9, 64, 40, 8, 2},
                                  {3, 24, 16, 5, 5},   {1, 64, 32, 8, 4},     {3, 128, 48, 6, 3},
                                  {16, 96, 64, 20, 8}, {2, 1024, 768, 9, 8}};

// Per token, k distinct expert ids in a random order, and positive weights.
void RandomRouting(const MoeShape& s, std::mt19937& rng, std::vector<int32_t>& ids, std::vector<float>& w) {
  ids.clear();
  w.clear();
  for (int64_t t = 0; t < s.T; ++t) {
    std::vector<int32_t> all(static_cast<size_t>(s.E));
    for (int64_t e = 0; e < s.E; ++e) all[e] = static_cast<int32_t>(e);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < s.k; ++j) {
      ids.push_back(all[j]);
      w.push_back(std::uniform_real_distribution<float>(0.05f, 1.0f)(rng));
    }
  }
}

// fp8 codes of near-normal values (sigma 1): the expert math in a realistic range.
std::vector<uint8_t> Fp8Codes(size_t n, uint32_t seed) {
  std::vector<uint8_t> c(n);
  const std::vector<float> v = Normal(n, seed);
  for (size_t i = 0; i < n; ++i) c[i] = vt::numerics::QuantizeFp8(v[i], 1.0f);
  return c;
}

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

// Σ_j |w_j| Σ_i |w_down[e*H + h, i] · a_i| per output [T, H], a from float64 GEMMs of the
// inputs as stored (alphas folded in for FP8).
std::vector<double> ExpertMagnitudes(const MoeShape& s, const vt::Tensor& x, const std::vector<int32_t>& ids,
                                     const std::vector<float>& w, const vt::Tensor& w13, const vt::Tensor& w2,
                                     const std::vector<float>& al13, const std::vector<float>& al2) {
  std::vector<double> mag(static_cast<size_t>(s.T * s.H), 0.0);
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t e = ids[t * s.k + j];
      const double a13 = al13.empty() ? 1.0 : al13[e], a2 = al2.empty() ? 1.0 : al2[e];
      std::vector<double> a(static_cast<size_t>(s.I));
      for (int64_t i = 0; i < s.I; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < s.H; ++c) {
          g += ValueAt(x, t * s.H + c) * ValueAt(w13, (e * 2 * s.I + i) * s.H + c);
          u += ValueAt(x, t * s.H + c) * ValueAt(w13, (e * 2 * s.I + s.I + i) * s.H + c);
        }
        a[i] = Silu(a13 * g) * (a13 * u);
      }
      for (int64_t h = 0; h < s.H; ++h) {
        double m = 0;
        for (int64_t i = 0; i < s.I; ++i) m += std::fabs(ValueAt(w2, (e * s.H + h) * s.I + i) * a[i]);
        mag[t * s.H + h] += std::fabs(w[t * s.k + j]) * a2 * m;
      }
    }
  return mag;
}

TolFn ShareOfMagnitude(std::vector<double> mag, double share, DType out) {
  return [mag = std::move(mag), share, out](size_t, int64_t i, double want) {
    return share * mag[i] + 2.0 * Ulp(out, want);
  };
}

}  // namespace

std::vector<OpCase> MoeTopKRoutingCases() {
  std::vector<OpCase> cases;
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {{1, 4, 1}, {7, 8, 2}, {5, 128, 8}, {3, 6, 6}, {33, 60, 4}};
  uint32_t seed = 500;
  for (auto [T, E, k] : shapes) {
    std::vector<float> l = Normal(static_cast<size_t>(T * E), ++seed, 2.0f);
    // Ties: row 1 repeats a value across experts, row 2 is all equal.
    if (T > 1)
      for (int64_t i = 0; i < E; i += 2) l[E + i] = l[E];
    if (T > 2)
      for (int64_t i = 0; i < E; ++i) l[2 * E + i] = 0.5f;
    for (bool renorm : {true, false}) {
      OpCase c{vt::StrCat(T, "x", E, " k=", k, renorm ? " renormalized" : ""),
               {Host(l, {T, E}, DType::kF32)},
               {Filled({T, k}, DType::kI32), Filled({T, k}, DType::kF32)},
               nullptr,
               nullptr,
               nullptr};
      c.run = [renorm](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::MoeTopKRouting(q, out[0], out[1], in[0], renorm);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> MoeExpertsCases() {
  std::vector<OpCase> cases;
  std::mt19937 rng(77);
  uint32_t seed = 900;
  const std::pair<DType, DType> dtypes[] = {{DType::kF32, DType::kBF16}, {DType::kBF16, DType::kBF16},
                                            {DType::kF32, DType::kF32}};
  for (const MoeShape& s : kMoeShapes) {
    for (auto [act, wd] : dtypes) {
      std::vector<int32_t> ids;
      std::vector<float> w;
      RandomRouting(s, rng, ids, w);
      const vt::Tensor x = Host(Normal(s.T * s.H, ++seed), {s.T, s.H}, act);
      const vt::Tensor w13 = Host(Normal(s.E * 2 * s.I * s.H, ++seed, 1.0f / std::sqrt(float(s.H))),
                                  {s.E * 2 * s.I, s.H}, wd);
      const vt::Tensor w2 =
          Host(Normal(s.E * s.H * s.I, ++seed, 1.0f / std::sqrt(float(s.I))), {s.E * s.H, s.I}, wd);
      const double share = act == DType::kF32 ? 16.0 * double(s.H + s.I) * FLT_EPSILON : 0x1p-6;
      OpCase c{vt::StrCat(s.T, " tokens H=", s.H, " I=", s.I, " E=", s.E, " k=", s.k, " act ", vt::DTypeName(act),
                          " weights ", vt::DTypeName(wd)),
               {x, HostOf(ids, {s.T, s.k}, DType::kI32), HostOf(w, {s.T, s.k}, DType::kF32), w13, w2},
               {Filled({s.T, s.H}, act)},
               nullptr,
               ShareOfMagnitude(ExpertMagnitudes(s, x, ids, w, w13, w2, {}, {}), share, act),
               nullptr};
      c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::MoeExperts(q, out[0], in[0], in[1], in[2], in[3], in[4]);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// The stacked expert weights as the model prepares them: each expert's rows may get a
// copy of their own, laid out for the queue's matmul kernels.
static void PrepareExperts(const vt::Queue& q, vt::Tensor& w13, vt::Tensor& w2, int64_t E, int64_t I, int64_t H) {
  std::vector<int64_t> r13, r2;
  for (int64_t e = 0; e < E; ++e) {
    r13.push_back(e * 2 * I);
    r2.push_back(e * H);
  }
  w13.SetReadOnly();
  w2.SetReadOnly();
  w13 = vt::PrepareWeight(q, w13, vt::WeightUse::kMatmulB, r13);
  w2 = vt::PrepareWeight(q, w2, vt::WeightUse::kMatmulB, r2);
}

std::vector<OpCase> MoeExpertsFp8Cases() {
  std::vector<OpCase> cases;
  std::mt19937 rng(78);
  uint32_t seed = 1300;
  for (const MoeShape& s : kMoeFp8Shapes) {
    for (int variant = 0; variant < 3; ++variant) {
      const DType act = variant == 0 ? DType::kF32 : DType::kBF16;
      const bool prepared = variant == 2;
      std::vector<int32_t> ids;
      std::vector<float> w, al13, al2;
      RandomRouting(s, rng, ids, w);
      for (int64_t e = 0; e < s.E; ++e) {
        al13.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / float(s.H));
        al2.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / float(s.I));
      }
      const float down_scale = 0.01f;
      const vt::Tensor x8 = HostOf(Fp8Codes(s.T * s.H, ++seed), {s.T, s.H}, DType::kF8E4M3);
      const vt::Tensor w13 = HostOf(Fp8Codes(s.E * 2 * s.I * s.H, ++seed), {s.E * 2 * s.I, s.H}, DType::kF8E4M3);
      const vt::Tensor w2 = HostOf(Fp8Codes(s.E * s.H * s.I, ++seed), {s.E * s.H, s.I}, DType::kF8E4M3);
      OpCase c{vt::StrCat(s.T, " tokens H=", s.H, " I=", s.I, " E=", s.E, " k=", s.k, " out ", vt::DTypeName(act),
                          prepared ? " prepared weights" : ""),
               {x8, HostOf(ids, {s.T, s.k}, DType::kI32), HostOf(w, {s.T, s.k}, DType::kF32), w13,
                HostOf(al13, {s.E}, DType::kF32), w2, HostOf(al2, {s.E}, DType::kF32)},
               {Filled({s.T, s.H}, act)},
               nullptr,
               ShareOfMagnitude(ExpertMagnitudes(s, x8, ids, w, w13, w2, al13, al2), 0x1p-5, act),
               nullptr};
      const int64_t I = s.I, H = s.H, E = s.E;
      c.run = [prepared, down_scale, I, H, E](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::Tensor w13 = in[3], w2 = in[5];
        if (prepared) PrepareExperts(q, w13, w2, E, I, H);
        vt::MoeExpertsFp8(q, out[0], in[0], in[1], in[2], w13, in[4], w2, down_scale, in[6]);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// Per-token activation scales: x as its codes, a scale per token (token 0 of the second
// shape all zeros, so its down inputs take the scale floor), one weight scale per expert
// and projection. The magnitudes are those of the dequantized x with the weight scales as
// alphas; the same 2^-5 share as MoeExpertsFp8 (an e4m3fn step of one term).
std::vector<OpCase> MoeExpertsFp8PerTokenCases() {
  std::vector<OpCase> cases;
  std::mt19937 rng(79);
  uint32_t seed = 1700;
  int shape_index = 0;
  for (const MoeShape& s : kMoeFp8Shapes) {
    const bool zero_token = shape_index++ == 1;
    for (int variant = 0; variant < 3; ++variant) {
      const DType act = variant == 0 ? DType::kF32 : DType::kBF16;
      const bool prepared = variant == 2;
      std::vector<int32_t> ids;
      std::vector<float> w, ws13, ws2, sx;
      RandomRouting(s, rng, ids, w);
      for (int64_t e = 0; e < s.E; ++e) {
        ws13.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / float(s.H));
        ws2.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / float(s.I));
      }
      for (int64_t t = 0; t < s.T; ++t) sx.push_back(std::uniform_real_distribution<float>(0.25f, 4.0f)(rng));
      std::vector<uint8_t> x_codes = Fp8Codes(s.T * s.H, ++seed);
      if (zero_token) std::fill(x_codes.begin(), x_codes.begin() + s.H, uint8_t{0});
      std::vector<float> x_values;  // what the codes stand for: code * its token's scale
      for (int64_t i = 0; i < s.T * s.H; ++i) x_values.push_back(vt::Fp8E4M3ToFloat(x_codes[i]) * sx[i / s.H]);
      const vt::Tensor x8 = HostOf(x_codes, {s.T, s.H}, DType::kF8E4M3);
      const vt::Tensor w13 = HostOf(Fp8Codes(s.E * 2 * s.I * s.H, ++seed), {s.E * 2 * s.I, s.H}, DType::kF8E4M3);
      const vt::Tensor w2 = HostOf(Fp8Codes(s.E * s.H * s.I, ++seed), {s.E * s.H, s.I}, DType::kF8E4M3);
      const vt::Tensor xv = HostOf(x_values, {s.T, s.H}, DType::kF32);
      OpCase c{vt::StrCat(s.T, " tokens H=", s.H, " I=", s.I, " E=", s.E, " k=", s.k, " out ", vt::DTypeName(act),
                          prepared ? " prepared weights" : "", zero_token ? " token 0 zero" : ""),
               {x8, HostOf(sx, {s.T, 1}, DType::kF32), HostOf(ids, {s.T, s.k}, DType::kI32),
                HostOf(w, {s.T, s.k}, DType::kF32), w13, HostOf(ws13, {s.E}, DType::kF32), w2,
                HostOf(ws2, {s.E}, DType::kF32)},
               {Filled({s.T, s.H}, act)},
               nullptr,
               ShareOfMagnitude(ExpertMagnitudes(s, xv, ids, w, w13, w2, ws13, ws2), 0x1p-5, act),
               nullptr};
      const int64_t I = s.I, H = s.H, E = s.E;
      c.run = [prepared, I, H, E](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::Tensor w13 = in[4], w2 = in[6];
        if (prepared) PrepareExperts(q, w13, w2, E, I, H);
        vt::MoeExpertsFp8PerToken(q, out[0], in[0], in[1], in[2], in[3], w13, in[5], w2, in[7]);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// Block-wise and per-channel scales (MoeExpertsFp8GroupScaled): block shapes whose I and H
// end partway through a block (so an expert's gate and up rows have their own scale rows),
// k = 1 and k = 8, 1 and 40 tokens, the expert width of Qwen3-30B-A3B; per-channel with one
// group per row and the per-token floors. Token 0 of the second case is all zeros (its down
// inputs take the floors). The magnitudes are those of the dequantized operands (code times
// its scales); the tolerance is MoeExpertsFp8's 2^-5 share: an e4m3fn step of one down input
// dwarfs MatmulFp8GroupScaled's 4·K·FLT_EPSILON bound on each product.
std::vector<OpCase> MoeExpertsFp8GroupScaledCases() {
  struct GroupCase {
    MoeShape s;
    int64_t bn, bk;  // bn 1 and bk 0: per-channel (bk = max(H, I))
  };
  const GroupCase kCases[] = {{{1, 64, 40, 8, 2}, 16, 16},       {{5, 48, 24, 6, 3}, 32, 16},
                              {{1, 200, 192, 8, 1}, 128, 128},   {{40, 256, 192, 8, 8}, 128, 128},
                              {{2, 1024, 768, 9, 8}, 128, 128},  {{3, 24, 16, 5, 5}, 1, 0},
                              {{40, 200, 192, 8, 8}, 1, 0},      {{1, 64, 40, 8, 1}, 1, 0}};
  std::vector<OpCase> cases;
  std::mt19937 rng(80);
  uint32_t seed = 2100;
  int case_index = 0;
  for (const GroupCase& gc : kCases) {
    const MoeShape& s = gc.s;
    const bool channel = gc.bk == 0, zero_token = case_index++ == 1;
    const int64_t bn = gc.bn, bk = channel ? std::max(s.H, s.I) : gc.bk;
    const int64_t nI = (s.I + bn - 1) / bn, nH = (s.H + bn - 1) / bn, GH = (s.H + bk - 1) / bk,
                  GI = (s.I + bk - 1) / bk;
    const float amax_floor = channel ? 0.0f : vt::kFp8BlockAmaxFloor;
    const float scale_floor = channel ? vt::kFp8PerTokenScaleFloor : 0.0f;
    for (DType act : {DType::kF32, DType::kBF16}) {
      std::vector<int32_t> ids;
      std::vector<float> w, s13, s2, sx;
      RandomRouting(s, rng, ids, w);
      for (int64_t i = 0; i < s.E * 2 * nI * GH; ++i)
        s13.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / float(s.H));
      for (int64_t i = 0; i < s.E * nH * GI; ++i)
        s2.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) / float(s.I));
      for (int64_t i = 0; i < s.T * GH; ++i) sx.push_back(std::uniform_real_distribution<float>(0.25f, 4.0f)(rng));
      std::vector<uint8_t> x_codes = Fp8Codes(s.T * s.H, ++seed);
      if (zero_token) std::fill(x_codes.begin(), x_codes.begin() + s.H, uint8_t{0});
      const std::vector<uint8_t> c13 = Fp8Codes(s.E * 2 * s.I * s.H, ++seed), c2 = Fp8Codes(s.E * s.H * s.I, ++seed);
      // The values the codes stand for, each times its scales (for the magnitudes).
      std::vector<float> xv, v13, v2;
      for (int64_t i = 0; i < s.T * s.H; ++i)
        xv.push_back(vt::Fp8E4M3ToFloat(x_codes[i]) * sx[(i / s.H) * GH + (i % s.H) / bk]);
      for (int64_t r = 0; r < s.E * 2 * s.I; ++r) {
        const int64_t e = r / (2 * s.I), n = r % (2 * s.I);
        const int64_t srow = e * 2 * nI + (n < s.I ? n / bn : nI + (n - s.I) / bn);
        for (int64_t c = 0; c < s.H; ++c) v13.push_back(vt::Fp8E4M3ToFloat(c13[r * s.H + c]) * s13[srow * GH + c / bk]);
      }
      for (int64_t r = 0; r < s.E * s.H; ++r) {
        const int64_t srow = (r / s.H) * nH + (r % s.H) / bn;
        for (int64_t c = 0; c < s.I; ++c) v2.push_back(vt::Fp8E4M3ToFloat(c2[r * s.I + c]) * s2[srow * GI + c / bk]);
      }
      OpCase c{vt::StrCat(s.T, " tokens H=", s.H, " I=", s.I, " E=", s.E, " k=", s.k,
                          channel ? " per-channel" : vt::StrCat(" blocks ", bn, "x", bk), " out ", vt::DTypeName(act),
                          zero_token ? " token 0 zero" : ""),
               {HostOf(x_codes, {s.T, s.H}, DType::kF8E4M3), HostOf(sx, {s.T, GH}, DType::kF32),
                HostOf(ids, {s.T, s.k}, DType::kI32), HostOf(w, {s.T, s.k}, DType::kF32),
                HostOf(c13, {s.E * 2 * s.I, s.H}, DType::kF8E4M3), HostOf(s13, {s.E * 2 * nI, GH}, DType::kF32),
                HostOf(c2, {s.E * s.H, s.I}, DType::kF8E4M3), HostOf(s2, {s.E * nH, GI}, DType::kF32)},
               {Filled({s.T, s.H}, act)},
               nullptr,
               ShareOfMagnitude(ExpertMagnitudes(s, HostOf(xv, {s.T, s.H}, DType::kF32), ids, w,
                                                 HostOf(v13, {s.E * 2 * s.I, s.H}, DType::kF32),
                                                 HostOf(v2, {s.E * s.H, s.I}, DType::kF32), {}, {}),
                                0x1p-5, act),
               nullptr};
      c.run = [bn, bk, amax_floor, scale_floor](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::MoeExpertsFp8GroupScaled(q, out[0], in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], bn, bk,
                                     amax_floor, scale_floor);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

}  // namespace vt_table
