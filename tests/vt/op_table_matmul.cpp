// Table cases of MatmulFp8 and Matmul. The GEMMs promise no byte equality across backends
// (their f32 sums run in different orders), only the DESIGN bound against a float64
// reference; the reference run is within that bound too, so a backend may differ from it
// by twice the bound. The shapes cover K = 1, odd N and K, tails of the vector widths and
// the small-M streaming paths; a prepared weight (vt::PrepareWeight) takes the CPU's
// re-laid-out copy where the level has one.
#include <cmath>
#include <random>

#include "matmul_test_util.h"
#include "op_table.h"

namespace vt_table {

namespace {

using vt::DType;

// A few shapes per path; matmul_fp8_test.cpp, matmul_bf16_test.cpp and the CUDA matmul
// tests cover each kernel variant's tiles and crossovers against float64.
const vt_test::Shape3 kShapes[] = {
    {1, 7, 1},  {1, 33, 67}, {2, 5, 31},   {5, 9, 257},  {17, 31, 65},
    {65, 35, 1}, {4, 8, 128}, {9, 11, 1600}, {1, 37, 1040},
};


// Σ_k |a[m,k]·b[n,k]| of two host tensors of any float dtype, [M, N] row-major.
std::vector<double> Magnitudes(const vt::Tensor& a, const vt::Tensor& b) {
  const int64_t M = a.dim(0), N = b.dim(0), K = a.dim(1);
  std::vector<double> av(a.numel()), bv(b.numel()), mag(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < a.numel(); ++i) av[i] = ValueAt(a, i);
  for (int64_t i = 0; i < b.numel(); ++i) bv[i] = ValueAt(b, i);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(av[m * K + k] * bv[n * K + k]);
      mag[m * N + n] = s;
    }
  return mag;
}

// Twice the DESIGN bound of output element i (see the file comment).
TolFn TwiceTheBound(std::vector<double> mag, std::vector<float> bias, double alpha, int64_t K, int64_t N,
                    DType out) {
  return [mag = std::move(mag), bias = std::move(bias), alpha, K, N, out](size_t, int64_t i, double want) {
    const double b = bias.empty() ? 0.0 : bias[i % N];
    return 2.0 * vt_test::MatmulBound(want, mag[i], alpha, b, K, out);
  };
}

}  // namespace

std::vector<OpCase> MatmulFp8Cases() {
  std::vector<OpCase> cases;
  std::mt19937 rng(1234);
  const float alpha = 0.0123f;
  for (const vt_test::Shape3& s : kShapes) {
    const vt::Tensor a = HostOf(vt_test::RandomFp8(s.M * s.K, rng), {s.M, s.K}, DType::kF8E4M3);
    const vt::Tensor b = HostOf(vt_test::RandomFp8(s.N * s.K, rng), {s.N, s.K}, DType::kF8E4M3);
    const std::vector<float> bias = Normal(s.N, static_cast<uint32_t>(s.N * 7 + s.K), 50.0f);
    const std::vector<double> mag = Magnitudes(a, b);
    // F32 out without bias; BF16 out with the bias; BF16 out on a prepared weight.
    for (int variant = 0; variant < 3; ++variant) {
      const DType od = variant == 0 ? DType::kF32 : DType::kBF16;
      const bool with_bias = variant >= 1, prepared = variant == 2;
      OpCase c{vt::StrCat(s.M, "x", s.N, "x", s.K, " out ", vt::DTypeName(od), with_bias ? " bias" : "",
                          prepared ? " prepared weight" : ""),
               {a, b},
               {Filled({s.M, s.N}, od)},
               nullptr,
               TwiceTheBound(mag, with_bias ? bias : std::vector<float>{}, alpha, s.K, s.N, od),
               nullptr};
      if (with_bias) c.inputs.push_back(Host(bias, {s.N}, DType::kF32));
      c.run = [alpha, prepared](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::Tensor b = in[1];
        if (prepared) {  // as a model prepares its weights: a backend may keep its own layout
          b.SetReadOnly();
          b = vt::PrepareWeight(q, b, vt::WeightUse::kMatmulB);
        }
        vt::MatmulFp8(q, out[0], in[0], b, alpha, in.size() > 2 ? &in[2] : nullptr);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// MatmulFp8GroupScaled: block-wise scales (128 x 128 blocks, N and K not multiples of
// 128, partial last blocks) and per-channel/per-token scales (one group of K, a scale per
// row of b), M = 1, 3, 33; F32 out, and BF16 out with a bias. Within twice the bound of
// vt/ops/matmul.h against the scalar reference.
std::vector<OpCase> MatmulFp8GroupScaledCases() {
  struct S {
    int64_t M, N, K, block_n, block_k;
  };
  const S shapes[] = {{1, 300, 520, 128, 128}, {3, 130, 257, 128, 128}, {33, 129, 384, 128, 128},
                      {1, 7, 1, 128, 128},     {5, 256, 128, 128, 128}, {1, 33, 67, 1, 67},
                      {3, 300, 1000, 1, 1000}, {33, 65, 129, 1, 129},   {3, 17, 300, 16, 64}};
  std::mt19937 rng(4321);
  std::uniform_real_distribution<float> ex(-9.0f, -3.0f);
  std::vector<OpCase> cases;
  for (const S& s : shapes) {
    const int64_t G = (s.K + s.block_k - 1) / s.block_k, NB = (s.N + s.block_n - 1) / s.block_n;
    const std::vector<uint8_t> av = vt_test::RandomFp8(s.M * s.K, rng), bv = vt_test::RandomFp8(s.N * s.K, rng);
    std::vector<float> sa(static_cast<size_t>(s.M * G)), sb(static_cast<size_t>(NB * G));
    for (auto& x : sa) x = std::exp2(ex(rng));
    for (auto& x : sb) x = std::exp2(ex(rng));
    std::vector<double> mag(static_cast<size_t>(s.M * s.N));
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        double t = 0;
        for (int64_t k = 0; k < s.K; ++k)
          t += std::fabs(static_cast<double>(vt::Fp8E4M3ToFloat(av[m * s.K + k])) * vt::Fp8E4M3ToFloat(bv[n * s.K + k]) *
                         sa[m * G + k / s.block_k] * sb[(n / s.block_n) * G + k / s.block_k]);
        mag[m * s.N + n] = t;
      }
    for (int variant = 0; variant < 2; ++variant) {
      const DType od = variant == 0 ? DType::kF32 : DType::kBF16;
      const bool with_bias = variant == 1;
      const std::vector<float> bias = with_bias ? Normal(s.N, static_cast<uint32_t>(s.N + s.K), 0.5f) : std::vector<float>{};
      OpCase c{vt::StrCat(s.M, "x", s.N, "x", s.K, " blocks ", s.block_n, "x", s.block_k, " out ", vt::DTypeName(od),
                          with_bias ? " bias" : ""),
               {HostOf(av, {s.M, s.K}, DType::kF8E4M3), HostOf(sa, {s.M, G}, DType::kF32),
                HostOf(bv, {s.N, s.K}, DType::kF8E4M3), HostOf(sb, {NB, G}, DType::kF32)},
               {Filled({s.M, s.N}, od)},
               nullptr,
               TwiceTheBound(mag, bias, 1.0, s.K, s.N, od),
               nullptr};
      if (with_bias) c.inputs.push_back(Host(bias, {s.N}, DType::kF32));
      const int64_t bn = s.block_n, bk = s.block_k;
      c.run = [bn, bk](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::MatmulFp8GroupScaled(q, out[0], in[0], in[1], in[2], in[3], bn, bk, in.size() > 4 ? &in[4] : nullptr);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> MatmulCases() {
  std::vector<OpCase> cases;
  const std::pair<DType, DType> pairs[] = {
      {DType::kF32, DType::kBF16}, {DType::kBF16, DType::kBF16}, {DType::kF32, DType::kF32}, {DType::kBF16, DType::kF32}};
  uint32_t seed = 99;
  for (const vt_test::Shape3& s : kShapes) {
    for (auto [adt, bdt] : pairs) {
      const vt::Tensor a = Host(Normal(s.M * s.K, ++seed, 1.0f, 6.0f), {s.M, s.K}, adt);
      const vt::Tensor b = Host(Normal(s.N * s.K, ++seed, 1.0f, 6.0f), {s.N, s.K}, bdt);
      // Out and bias alternate with the pair, so every pair meets both out dtypes over the shapes.
      const DType od = (seed / 2) % 2 == 0 ? DType::kF32 : DType::kBF16;
      const bool with_bias = (seed / 2) % 3 != 0;
      const std::vector<float> bias = with_bias ? Normal(s.N, ++seed, 4.0f) : std::vector<float>{};
      OpCase c{vt::StrCat(s.M, "x", s.N, "x", s.K, " a ", vt::DTypeName(adt), " b ", vt::DTypeName(bdt), " out ",
                          vt::DTypeName(od), with_bias ? " bias" : ""),
               {a, b},
               {Filled({s.M, s.N}, od)},
               nullptr,
               TwiceTheBound(Magnitudes(a, b), bias, 1.0, s.K, s.N, od),
               nullptr};
      if (with_bias) c.inputs.push_back(Host(bias, {s.N}, DType::kF32));
      c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
        vt::Matmul(q, out[0], in[0], in[1], in.size() > 2 ? &in[2] : nullptr);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// MatmulFp8SiluMulQuantFp8: outputs gate_up (twice the MatmulFp8 bound) and out8 (within
// one e4m3 step of the reference's codes where the two products differ, exact otherwise:
// the codes follow the products), both byte-identical to MatmulFp8 into BF16 then
// SiluMulQuantFp8 on the same backend (the definition). One-row shapes with K a multiple
// of 16 from 1024 are the CUDA decode GEMV's (pairs of gate and up rows in one CTA); I odd
// and not a multiple of the GEMV's row groups.
std::vector<OpCase> MatmulFp8SiluMulQuantFp8Cases() {
  struct S {
    int64_t M, I, K;
  };
  const S shapes[] = {{1, 37, 1024}, {1, 300, 3072}, {1, 1, 2048}, {1, 7, 1024}, {3, 33, 1040}, {2, 5, 64}};
  std::mt19937 rng(777);
  std::vector<OpCase> cases;
  for (const S& s : shapes) {
    const int64_t N = 2 * s.I;
    const vt::Tensor x8 = HostOf(vt_test::RandomFp8(s.M * s.K, rng), {s.M, s.K}, DType::kF8E4M3);
    const vt::Tensor w = HostOf(vt_test::RandomFp8(N * s.K, rng), {N, s.K}, DType::kF8E4M3);
    const float alpha = 0.0019f, scale = 0.0173f;
    TolFn bound = TwiceTheBound(Magnitudes(x8, w), {}, alpha, s.K, N, DType::kBF16);
    OpCase c{vt::StrCat(s.M, "x", N, "x", s.K),
             {x8, w},
             {Filled({s.M, s.I}, DType::kF8E4M3), Filled({s.M, N}, DType::kBF16)},
             nullptr,
             [bound](size_t k, int64_t i, double want) {
               // A code may move by one step where the products moved by their bound.
               return k == 0 ? std::max(std::fabs(want) / 8.0, std::ldexp(1.0, -9)) : bound(k, i, want);
             },
             nullptr};
    c.run = [alpha, scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
      vt::MatmulFp8SiluMulQuantFp8(q, out[0], out[1], in[0], in[1], alpha, scale);
    };
    c.definition = [alpha, scale](const vt::Queue& q, const Tensors& in, const Tensors& out) {
      vt::MatmulFp8(q, out[1], in[0], in[1], alpha);
      vt::SiluMulQuantFp8(q, out[0], out[1], scale);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace vt_table
