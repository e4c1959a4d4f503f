// Table cases of the element-wise and row-wise ops (quant, norm, activation, cast) and the
// fused recipes. All are byte-exact across backends and ISA levels: the contract fixes
// their arithmetic order (the quantizers and recipes), and the norms and activations
// reproduce the scalar order in their vector kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "op_table.h"

namespace vt_table {

namespace {

using vt::DType;

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

struct RowShape {
  int64_t rows, width;
};
// Widths on both sides of the CUDA CTA-per-row RMSNorm kernel's range [256, 32768] and
// inside it (12289: past 48 KiB of shared memory), the CPU vector widths' tails (17, 31,
// 32, 33, 1023) and a row count that leaves threads uneven work (33).
const RowShape kRowShapes[] = {{1, 1},    {3, 3},    {3, 17},   {3, 31},   {5, 32},    {5, 33},    {3, 64},    {7, 128},   {2, 255},
                               {4, 256},  {3, 1000}, {1, 1024}, {3, 1023}, {2, 4097},  {9, 4096},  {33, 100},  {1, 12289},
                               {1, 32768}, {1, 32769}};
// Out dtypes other than x's (the CPU kernels convert on store) at these widths, the
// vector widths' tails; every width takes out in x's dtype.
bool MixedOutAt(const RowShape& s) {
  for (int64_t w : {1, 3, 17, 64, 100, 1000, 1023, 4097})
    if (s.width == w) return true;
  return false;
}
// Rows past 4097 reach the CUDA kernels' row handling (the CTA-per-row range of RmsNorm);
// the fused recipes take them in fewer combinations.
bool WideRow(const RowShape& s) { return s.width > 4097; }
// SiLU-mul's shapes: the row shapes and one of 163840 elements, past the size from which
// the CUDA op runs its vector kernel (activation.cu).
std::vector<RowShape> SiluShapes() {
  std::vector<RowShape> shapes(std::begin(kRowShapes), std::end(kRowShapes));
  shapes.push_back({40, 4096});
  return shapes;
}
// Input scales of the fused recipes (1e-3 saturates many values), one per case in turn,
// so that each row shape meets every scale.
const float kFusedScales[] = {0.0092f, 0.13f, 0.77f, 1e-3f};
float FusedScale(int turn) { return kFusedScales[turn % std::size(kFusedScales)]; }

// Gate values past Exp's range (overflow, underflow), infinities and NaN, spread over the
// rows (SiluMul's input rows are [gate | up]).
std::vector<float> WithExtremeGates(std::vector<float> v) {
  const float inf = std::numeric_limits<float>::infinity();
  const float extremes[] = {95.0f, -95.0f, 88.73f, -103.9f, 120.0f, -120.0f, inf, -inf, std::nanf("")};
  for (size_t i = 5, e = 0; i < v.size(); i += 17, ++e) v[i] = extremes[e % std::size(extremes)];
  return v;
}

std::string Describe(const RowShape& s, DType d) {
  return vt::StrCat(s.rows, "x", s.width, " ", vt::DTypeName(d));
}

// Midpoints between adjacent e4m3 magnitudes times the scale (the ties that separate
// reciprocal-multiply from divide and RNE from other roundings), saturation, subnormals,
// signed zeros, infinities and NaN.
std::vector<float> QuantSpecials(float scale) {
  std::vector<float> v;
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = vt::Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    const float hi = vt::Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1));
    for (float s : {1.0f, -1.0f}) {
      v.push_back(s * (lo + hi) * 0.5f * scale);
      v.push_back(s * lo * scale);
      v.push_back(std::nextafter(s * (lo + hi) * 0.5f * scale, 0.0f));
    }
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float m : {448.0f, 449.0f, 463.9f, 464.0f, 464.1f, 480.0f, 1e6f, 3e38f})
    for (float s : {1.0f, -1.0f}) v.push_back(s * m * scale);
  for (float x : {inf, -inf, 0.0f, -0.0f, nan, -nan, 1e-40f, -1e-40f, 1e-45f, std::ldexp(1.0f, -10) * scale,
                  std::ldexp(3.0f, -11) * scale, std::ldexp(1.0f, -11) * scale})
    v.push_back(x);
  for (int k = 0; k <= 20; ++k) v.push_back(static_cast<float>(k) * std::ldexp(1.0f, -10) * scale);
  return v;
}

OpCase Quant(std::string name, vt::Tensor x, float scale) {
  OpCase c{std::move(name), {x}, {Filled(x.shape(), DType::kF8E4M3)}, nullptr, nullptr, nullptr};
  c.run = [scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
    vt::QuantFp8Static(q, out[0], in[0], scale);
  };
  return c;
}

}  // namespace

std::vector<OpCase> QuantCases() {
  std::vector<OpCase> cases;
  std::mt19937 rng(7);
  for (float scale : {1e-4f, 0.0092f, 0.13f, 0.77f, 1.0f, 3.3f, 250.0f}) {
    for (DType d : kFloatTypes) {
      const int64_t n = 4097;  // odd: no vector-width assumptions
      std::vector<float> v(n);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::uniform_real_distribution<float> ex(-12.0f, 10.0f);
      for (auto& x : v) x = nd(rng) * std::exp2(ex(rng)) * scale;
      cases.push_back(Quant(vt::StrCat("random ", vt::DTypeName(d), " scale ", scale), Host(v, {n}, d), scale));
    }
  }
  for (float scale : {0.0092f, 0.13f, 0.77f, 1.0f}) {
    const auto v = QuantSpecials(scale);
    for (DType d : kFloatTypes)
      cases.push_back(Quant(vt::StrCat("specials ", vt::DTypeName(d), " scale ", scale),
                            Host(v, {static_cast<int64_t>(v.size())}, d), scale));
  }
  // Every code twice (131072 elements: the CUDA op's vector kernel takes them).
  for (DType d : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> codes(131072);
    for (int i = 0; i < 131072; ++i) codes[i] = static_cast<uint16_t>(i < 65536 ? i : 131071 - i);
    const vt::Tensor x = HostOf(codes, {512, 256}, d);
    for (float scale : {0.0092f, 0.13f, 0.77f, 1.0f, 1e-3f})
      cases.push_back(Quant(vt::StrCat("every ", vt::DTypeName(d), " code, scale ", scale), x, scale));
  }
  return cases;
}

// QuantFp8PerTokenGroup: groups with a partial last one, one group per row (per token),
// group widths that are not powers of two; both formats' floors; rows with an all-zero
// group, tiny values (floored scales), subnormal inputs, NaNs of both signs and infinities.
std::vector<OpCase> QuantFp8PerTokenGroupCases() {
  struct S {
    int64_t M, K, G;
  };
  const S shapes[] = {{1, 1, 128},  {4, 128, 128}, {4, 300, 128}, {5, 4097, 128}, {4, 1000, 1000},
                      {33, 200, 64}, {6, 7, 3},     {1, 2048, 2048}, {2, 129, 128}, {7, 513, 512}};
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<OpCase> cases;
  uint32_t seed = 500;
  for (const S& sh : shapes) {
    std::vector<float> v = Normal(static_cast<size_t>(sh.M * sh.K), ++seed, 1.0f, 8.0f);
    auto at = [&](int64_t m, int64_t k) -> float& { return v[static_cast<size_t>(m * sh.K + k)]; };
    if (sh.M >= 2)
      for (int64_t k = 0; k < std::min(sh.K, sh.G); ++k) at(1, k) = (k & 1) ? -0.0f : 0.0f;
    if (sh.M >= 3)
      for (int64_t k = 0; k < sh.K; ++k) at(2, k) *= (k % 3 == 0) ? 1e-40f : 1e-12f;
    if (sh.M >= 4) {
      at(3, 0) = nan;
      if (sh.K > 5) at(3, 5) = -nan;
      if (sh.K > sh.G) at(3, sh.G) = -inf;
      if (sh.K > sh.G + 3) at(3, sh.G + 3) = inf;
    }
    for (DType d : kFloatTypes) {
      for (int fmt = 0; fmt < 2; ++fmt) {
        const float af = fmt == 0 ? vt::kFp8BlockAmaxFloor : 0.0f;
        const float sf = fmt == 0 ? 0.0f : vt::kFp8PerTokenScaleFloor;
        const int64_t groups = (sh.K + sh.G - 1) / sh.G;
        OpCase c{vt::StrCat(sh.M, "x", sh.K, " group ", sh.G, " ", vt::DTypeName(d), fmt == 0 ? " block" : " token"),
                 {Host(v, {sh.M, sh.K}, d)},
                 {Filled({sh.M, sh.K}, DType::kF8E4M3), Filled({sh.M, groups}, DType::kF32)},
                 nullptr,
                 nullptr,
                 nullptr};
        const int64_t G = sh.G;
        c.run = [G, af, sf](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::QuantFp8PerTokenGroup(q, out[0], out[1], in[0], G, af, sf);
        };
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

std::vector<OpCase> RmsNormCases() {
  std::vector<OpCase> cases;
  for (const RowShape& s : kRowShapes) {
    const auto xv = RowsWithSpecials(s.rows, s.width, 1), wv = Normal(s.width, 2);
    const auto rv = Normal(s.rows * s.width, 3, 2.0f);
    for (DType xd : kFloatTypes) {
      for (DType od : kFloatTypes) {
        if (od != xd && !MixedOutAt(s)) continue;
        // The weight in out's dtype, and in F32 where out is x's dtype (once where that is F32).
        for (int wi = 0; wi < (od == DType::kF32 || od != xd ? 1 : 2); ++wi) {
          const DType wd = wi == 0 ? od : DType::kF32;
          for (bool with_res : {false, true}) {
            const vt::Shape shape{s.rows, s.width};
            OpCase c{vt::StrCat(Describe(s, xd), " out ", vt::DTypeName(od), " weight ", vt::DTypeName(wd),
                                with_res ? " residual" : ""),
                     {Host(xv, shape, xd), Host(wv, {s.width}, wd)},
                     {Filled(shape, od)},
                     nullptr,
                     nullptr,
                     nullptr};
            if (with_res) c.outputs.push_back(Host(rv, shape, xd));
            c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
              vt::RmsNorm(q, out[0], in[0], in[1], 1e-6f, out.size() > 1 ? &out[1] : nullptr);
            };
            cases.push_back(std::move(c));
          }
        }
      }
    }
  }
  return cases;
}

std::vector<OpCase> RmsNormGatedCases() {
  std::vector<OpCase> cases;
  for (const RowShape& s : kRowShapes) {
    const auto xv = RowsWithSpecials(s.rows, s.width, 4), gv = RowsWithSpecials(s.rows, s.width, 5);
    const auto wv = Normal(s.width, 6);
    for (DType xd : kFloatTypes) {
      const vt::Shape shape{s.rows, s.width};
      OpCase c{Describe(s, xd),
               {Host(xv, shape, xd), Host(gv, shape, xd), Host(wv, {s.width}, xd)},
               {Filled(shape, xd)},
               nullptr,
               nullptr,
               nullptr};
      c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::RmsNormGated(q, out[0], in[0], in[1], in[2], 1e-5f);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> SiluMulCases() {
  std::vector<OpCase> cases;
  for (const RowShape& s : SiluShapes()) {
    const std::vector<float> v = WithExtremeGates(RowsWithSpecials(s.rows, 2 * s.width, 8));
    for (DType xd : kFloatTypes) {
      for (DType od : kFloatTypes) {
        if (od != xd && !MixedOutAt(s)) continue;
        OpCase c{vt::StrCat(Describe(s, xd), " out ", vt::DTypeName(od)), {Host(v, {s.rows, 2 * s.width}, xd)},
                 {Filled({s.rows, s.width}, od)}, nullptr, nullptr, nullptr};
        c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) { vt::SiluMul(q, out[0], in[0]); };
        c.nan_sign_free = true;  // the -inf gates
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

// Per-row and per-element gates, with and without a base (in place on it, as the model runs
// it), gates far beyond Exp's range and NaN among x, gate and base.
std::vector<OpCase> SigmoidGatedAddCases() {
  std::vector<OpCase> cases;
  for (const RowShape& s : kRowShapes) {
    const std::vector<float> x = RowsWithSpecials(s.rows, s.width, 31);
    const std::vector<float> base = RowsWithSpecials(s.rows, s.width, 32);
    for (int64_t G : {int64_t{1}, s.width}) {
      std::vector<float> g = Normal(static_cast<size_t>(s.rows * G), 33, 3.0f, 2.0f);
      if (g.size() > 2) {
        g[0] = -200.0f;
        g[1] = 200.0f;
      }
      for (DType xd : kFloatTypes) {
        for (bool with_base : {false, true}) {
          const DType gd = xd == DType::kF32 ? DType::kBF16 : DType::kF32;
          OpCase c{vt::StrCat(Describe(s, xd), " gate [R, ", G, "] ", vt::DTypeName(gd), with_base ? " on base" : ""),
                   {Host(x, {s.rows, s.width}, xd), Host(g, {s.rows, G}, gd)},
                   {with_base ? Host(base, {s.rows, s.width}, xd) : Filled({s.rows, s.width}, xd)},
                   nullptr, nullptr, nullptr};
          if (with_base)
            c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
              vt::SigmoidGatedAdd(q, out[0], in[0], in[1], &out[0]);
            };
          else
            c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
              vt::SigmoidGatedAdd(q, out[0], in[0], in[1]);
            };
          cases.push_back(std::move(c));
        }
      }
    }
  }
  return cases;
}

std::vector<OpCase> CastCases() {
  // Every 16-bit pattern, every fp8 byte, and f32 values of every class and around the
  // BF16/F16 rounding points and limits.
  Tensors inputs;
  std::vector<uint16_t> codes(65536);
  for (int i = 0; i < 65536; ++i) codes[i] = static_cast<uint16_t>(i);
  for (DType d : {DType::kBF16, DType::kF16}) inputs.push_back(HostOf(codes, {65536}, d));
  // Every fp8 code, then random codes with a tail shorter than a vector.
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<uint8_t> fp8(256 + 1000 + 7);
  for (size_t i = 0; i < fp8.size(); ++i) fp8[i] = static_cast<uint8_t>(i < 256 ? i : any(rng));
  inputs.push_back(HostOf(fp8, {static_cast<int64_t>(fp8.size())}, DType::kF8E4M3));
  // F32: random bit patterns (every class), values log-uniform over the F16 range and past
  // it both ways (subnormals, overflow), and the F16/BF16 limits.
  std::vector<uint32_t> bits;
  for (int i = 0; i < 100003; ++i) bits.push_back(any(rng));
  std::uniform_real_distribution<double> e(-26, 17);
  std::vector<float> values;
  for (int i = 0; i < 100000; ++i) values.push_back(static_cast<float>(std::exp2(e(rng)) * ((i & 1) ? 1 : -1)));
  for (float f : {65504.0f, 65519.0f, 65520.0f, 65519.99f, 6e-8f, 3e-8f, 2.98e-8f, 1e-40f, 0.0f, -0.0f})
    values.push_back(f);
  for (float f : values) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bits.push_back(u);
  }
  inputs.push_back(HostOf(bits, {static_cast<int64_t>(bits.size())}, DType::kF32));
  std::vector<OpCase> cases;
  for (const vt::Tensor& x : inputs) {
    for (DType od : kFloatTypes) {
      OpCase c{vt::StrCat(vt::DTypeName(x.dtype()), " -> ", vt::DTypeName(od)), {x}, {Filled(x.shape(), od)},
               nullptr, nullptr, nullptr};
      c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) { vt::Cast(q, out[0], in[0]); };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// ---- fused recipes: the op, and FusedChainComposite as its definition --------------------

namespace {
// RmsNormQuantFp8's cases, or with zero_centred RmsNormZeroCentredQuantFp8's (its own seeds).
std::vector<OpCase> NormQuantFp8Cases(bool zero_centred) {
  std::vector<OpCase> cases;
  int turn = zero_centred ? 1 : 0;  // the scale's, across the shapes
  const uint32_t seed = zero_centred ? 221 : 21;
  for (const RowShape& s : kRowShapes) {
    const auto xv = RowsWithSpecials(s.rows, s.width, seed), wv = Normal(s.width, seed + 1);
    const auto rv = Normal(s.rows * s.width, seed + 2, 2.0f);
    for (int di = 0; di < 3; ++di) {
      const DType xd = kFloatTypes[di];
      for (int mode = 0; mode < 3; ++mode) {  // 0: plain, 1: residual, 2: residual + BF16 side output
        if (WideRow(s) && mode != di) continue;  // wide rows: each mode once, in another dtype
        const float scale = FusedScale(turn++);
        const vt::Shape shape{s.rows, s.width};
        OpCase c{vt::StrCat(Describe(s, xd), " scale ", scale, mode >= 1 ? " residual" : "",
                            mode == 2 ? " normed" : ""),
                 {Host(xv, shape, xd), Host(wv, {s.width}, xd)},
                 {Filled(shape, DType::kF8E4M3)},
                 nullptr,
                 nullptr,
                 nullptr};
        if (mode >= 1) c.outputs.push_back(Host(rv, shape, xd));
        if (mode == 2) c.outputs.push_back(Filled(shape, DType::kBF16));
        c.run = [scale, zero_centred](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          const auto op = zero_centred ? &vt::RmsNormZeroCentredQuantFp8 : &vt::RmsNormQuantFp8;
          op(q, out[0], in[0], in[1], 1e-6f, scale, out.size() > 1 ? &out[1] : nullptr,
             out.size() > 2 ? &out[2] : nullptr);
        };
        c.definition = [scale, zero_centred](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::FusedArgs args;
          args.out = out[0];
          args.x = in[0];
          args.weight = in[1];
          if (out.size() > 1) args.residual = out[1];
          if (out.size() > 2) args.normed_out = out[2];
          args.eps = 1e-6f;
          args.input_scale = scale;
          if (zero_centred)
            vt::FusedChainComposite(q, vt::recipes::kRmsNormZeroCentredQuantFp8, args);
          else
            vt::FusedChainComposite(q, vt::recipes::kRmsNormQuantFp8, args);
        };
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}
}  // namespace

std::vector<OpCase> RmsNormQuantFp8Cases() { return NormQuantFp8Cases(false); }
std::vector<OpCase> RmsNormZeroCentredQuantFp8Cases() { return NormQuantFp8Cases(true); }

std::vector<OpCase> RmsNormGatedQuantFp8Cases() {
  std::vector<OpCase> cases;
  int turn = 0;  // the scale's, across the shapes
  for (const RowShape& s : kRowShapes) {
    const auto xv = RowsWithSpecials(s.rows, s.width, 31), gv = RowsWithSpecials(s.rows, s.width, 32);
    const auto wv = Normal(s.width, 33);
    for (DType xd : kFloatTypes) {
      const float scale = FusedScale(turn++);
      const vt::Shape shape{s.rows, s.width};
      OpCase c{vt::StrCat(Describe(s, xd), " scale ", scale),
               {Host(xv, shape, xd), Host(gv, shape, xd), Host(wv, {s.width}, xd)},
               {Filled(shape, DType::kF8E4M3)},
               nullptr,
               nullptr,
               nullptr};
      c.run = [scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::RmsNormGatedQuantFp8(q, out[0], in[0], in[1], in[2], 1e-6f, scale);
      };
      c.definition = [scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::FusedArgs args;
        args.out = out[0];
        args.x = in[0];
        args.gate = in[1];
        args.weight = in[2];
        args.eps = 1e-6f;
        args.input_scale = scale;
        vt::FusedChainComposite(q, vt::recipes::kRmsNormGatedQuantFp8, args);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> SiluMulQuantFp8Cases() {
  std::vector<OpCase> cases;
  int turn = 0;  // the scale's, across the shapes
  for (const RowShape& s : SiluShapes()) {
    const auto v = WithExtremeGates(RowsWithSpecials(s.rows, 2 * s.width, 41));
    for (DType xd : kFloatTypes) {
      const float scale = FusedScale(turn++);
      OpCase c{vt::StrCat(Describe(s, xd), " scale ", scale),
               {Host(v, {s.rows, 2 * s.width}, xd)},
               {Filled({s.rows, s.width}, DType::kF8E4M3)},
               nullptr,
               nullptr,
               nullptr};
      c.run = [scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::SiluMulQuantFp8(q, out[0], in[0], scale);
      };
      c.definition = [scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::FusedArgs args;
        args.out = out[0];
        args.x = in[0];
        args.input_scale = scale;
        vt::FusedChainComposite(q, vt::recipes::kSiluMulQuantFp8, args);
      };
      c.nan_sign_free = true;  // the -inf gates
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// ---- the same recipes with the per-token-group quantizer ----------------------------------

namespace {

// Group widths and floors in turn across the shapes: 128 (block FP8, its floors), the whole
// row (per-token FP8, its floors), 3 and 64 (partial last groups, groups narrower than a
// CUDA warp's row slice) with either format's floors.
struct GroupSetting {
  int64_t group_size;
  float amax_floor, scale_floor;
  const char* name;
};
GroupSetting GroupAt(int turn, int64_t width) {
  switch (turn % 4) {
    case 0: return {128, vt::kFp8BlockAmaxFloor, 0.0f, "block 128"};
    case 1: return {width, 0.0f, vt::kFp8PerTokenScaleFloor, "token"};
    case 2: return {3, vt::kFp8BlockAmaxFloor, 0.0f, "block 3"};
    default: return {64, 0.0f, vt::kFp8PerTokenScaleFloor, "token-floor 64"};
  }
}
int64_t GroupsOf(int64_t width, int64_t group_size) { return (width + group_size - 1) / group_size; }

}  // namespace

namespace {
// RmsNormQuantFp8PerTokenGroup's cases, or with zero_centred
// RmsNormZeroCentredQuantFp8PerTokenGroup's (its own seeds, the group settings shifted).
std::vector<OpCase> NormQuantFp8PerTokenGroupCases(bool zero_centred) {
  std::vector<OpCase> cases;
  int turn = zero_centred ? 1 : 0;
  const uint32_t seed = zero_centred ? 321 : 121;
  for (const RowShape& s : kRowShapes) {
    const auto xv = RowsWithSpecials(s.rows, s.width, seed), wv = Normal(s.width, seed + 1);
    const auto rv = Normal(s.rows * s.width, seed + 2, 2.0f);
    for (int di = 0; di < 3; ++di) {
      const DType xd = kFloatTypes[di];
      for (int mode = 0; mode < 3; ++mode) {  // 0: plain, 1: residual, 2: residual + BF16 side output
        if (WideRow(s) && mode != di) continue;
        const GroupSetting g = GroupAt(turn++, s.width);
        const vt::Shape shape{s.rows, s.width};
        OpCase c{vt::StrCat(Describe(s, xd), " ", g.name, mode >= 1 ? " residual" : "", mode == 2 ? " normed" : ""),
                 {Host(xv, shape, xd), Host(wv, {s.width}, xd)},
                 {Filled(shape, DType::kF8E4M3), Filled({s.rows, GroupsOf(s.width, g.group_size)}, DType::kF32)},
                 nullptr,
                 nullptr,
                 nullptr};
        if (mode >= 1) c.outputs.push_back(Host(rv, shape, xd));
        if (mode == 2) c.outputs.push_back(Filled(shape, DType::kBF16));
        c.run = [g, zero_centred](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          const auto op =
              zero_centred ? &vt::RmsNormZeroCentredQuantFp8PerTokenGroup : &vt::RmsNormQuantFp8PerTokenGroup;
          op(q, out[0], out[1], in[0], in[1], 1e-6f, g.group_size, g.amax_floor, g.scale_floor,
             out.size() > 2 ? &out[2] : nullptr, out.size() > 3 ? &out[3] : nullptr);
        };
        c.definition = [g, zero_centred](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::FusedArgs args;
          args.out = out[0];
          args.scales = out[1];
          args.x = in[0];
          args.weight = in[1];
          if (out.size() > 2) args.residual = out[2];
          if (out.size() > 3) args.normed_out = out[3];
          args.eps = 1e-6f;
          args.group_size = g.group_size;
          args.amax_floor = g.amax_floor;
          args.scale_floor = g.scale_floor;
          if (zero_centred)
            vt::FusedChainComposite(q, vt::recipes::kRmsNormZeroCentredQuantFp8PerTokenGroup, args);
          else
            vt::FusedChainComposite(q, vt::recipes::kRmsNormQuantFp8PerTokenGroup, args);
        };
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}
}  // namespace

std::vector<OpCase> RmsNormQuantFp8PerTokenGroupCases() { return NormQuantFp8PerTokenGroupCases(false); }
std::vector<OpCase> RmsNormZeroCentredQuantFp8PerTokenGroupCases() { return NormQuantFp8PerTokenGroupCases(true); }

std::vector<OpCase> RmsNormGatedQuantFp8PerTokenGroupCases() {
  std::vector<OpCase> cases;
  int turn = 0;
  for (const RowShape& s : kRowShapes) {
    const auto xv = RowsWithSpecials(s.rows, s.width, 131), gv = RowsWithSpecials(s.rows, s.width, 132);
    const auto wv = Normal(s.width, 133);
    for (DType xd : kFloatTypes) {
      const GroupSetting g = GroupAt(turn++, s.width);
      const vt::Shape shape{s.rows, s.width};
      OpCase c{vt::StrCat(Describe(s, xd), " ", g.name),
               {Host(xv, shape, xd), Host(gv, shape, xd), Host(wv, {s.width}, xd)},
               {Filled(shape, DType::kF8E4M3), Filled({s.rows, GroupsOf(s.width, g.group_size)}, DType::kF32)},
               nullptr,
               nullptr,
               nullptr};
      c.run = [g](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::RmsNormGatedQuantFp8PerTokenGroup(q, out[0], out[1], in[0], in[1], in[2], 1e-6f, g.group_size,
                                              g.amax_floor, g.scale_floor);
      };
      c.definition = [g](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::FusedArgs args;
        args.out = out[0];
        args.scales = out[1];
        args.x = in[0];
        args.gate = in[1];
        args.weight = in[2];
        args.eps = 1e-6f;
        args.group_size = g.group_size;
        args.amax_floor = g.amax_floor;
        args.scale_floor = g.scale_floor;
        vt::FusedChainComposite(q, vt::recipes::kRmsNormGatedQuantFp8PerTokenGroup, args);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> SiluMulQuantFp8PerTokenGroupCases() {
  std::vector<OpCase> cases;
  int turn = 0;
  for (const RowShape& s : SiluShapes()) {
    const auto v = WithExtremeGates(RowsWithSpecials(s.rows, 2 * s.width, 141));
    for (DType xd : kFloatTypes) {
      const GroupSetting g = GroupAt(turn++, s.width);
      OpCase c{vt::StrCat(Describe(s, xd), " ", g.name),
               {Host(v, {s.rows, 2 * s.width}, xd)},
               {Filled({s.rows, s.width}, DType::kF8E4M3), Filled({s.rows, GroupsOf(s.width, g.group_size)}, DType::kF32)},
               nullptr,
               nullptr,
               nullptr};
      c.run = [g](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::SiluMulQuantFp8PerTokenGroup(q, out[0], out[1], in[0], g.group_size, g.amax_floor, g.scale_floor);
      };
      c.definition = [g](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::FusedArgs args;
        args.out = out[0];
        args.scales = out[1];
        args.x = in[0];
        args.group_size = g.group_size;
        args.amax_floor = g.amax_floor;
        args.scale_floor = g.scale_floor;
        vt::FusedChainComposite(q, vt::recipes::kSiluMulQuantFp8PerTokenGroup, args);
      };
      c.nan_sign_free = true;  // the -inf gates
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

}  // namespace vt_table
