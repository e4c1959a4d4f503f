// MoeExpertsFp8GroupScaled (vt/ops/moe.h) against a float64 emulation written here from the
// formats (block FP8: vLLM's Fp8MoEMethod with block_quant; per-channel: compressed-tensors
// channel/token): x quantized per token and group in the test (amax / 448 with the format's
// floors, x / s to the nearest e4m3fn code by enumerating the grid), the fp8 products exact in
// float64 with each (row block, group) weight scale, expert e's gate rows reading its gate
// scale rows and its up rows its up scale rows (they do not share blocks when I is not a
// multiple of the block), each (token, expert) row of Silu(g) * u quantized per group of
// block_k with its own scales. Also: a token's bytes do not depend on its batch, and the
// errors name the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "elementwise_test_util.h"
#include "matmul_test_util.h"
#include "vt/cpu/matmul/kernels.h"  // Fp8GroupScaledAvx2Calls
#include "vt/detail/numerics.h"
#include "vt/vt.h"

namespace {

using vt::DType;
using vt::Tensor;

using vt_test::Gaussian;

Tensor F32(const std::vector<float>& v, const vt::Shape& s) { return vt_test::MakeTensor(v, s, DType::kF32); }

struct Format {
  int64_t bn, bk;  // bk 0: per-channel (one group per row)
  bool channel() const { return bk == 0; }
  float amax_floor() const { return channel() ? 0.0f : 1e-10f; }
  float scale_floor() const { return channel() ? static_cast<float>(1.0 / (448.0 * 512.0)) : 0.0f; }
};

// A group's quantization from the formats' text: s = max(max(amax, amax_floor) / 448 in f32,
// scale_floor), each code the e4m3fn value nearest to f32(x / s) (saturating); returns s.
float QuantizeGroupRef(const float* x, int64_t n, uint8_t* codes, const Format& f) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = std::max(static_cast<float>(std::max(double(amax), double(f.amax_floor())) / 448.0), f.scale_floor());
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<float>(static_cast<double>(x[i]) / s);
    codes[i] = vt_test::NearestE4M3(std::clamp(p, -448.0, 448.0));
  }
  return s;
}

struct Case {
  int64_t T, H, I, E, k;
  Format f;
  int64_t bk;  // the groups' width: f.bk, or max(H, I) per channel
  int64_t nI, nH, GH, GI;
  std::vector<uint8_t> x8, w13, w2;
  std::vector<float> sx, s13, s2, weights;
  std::vector<int32_t> ids;
};

// Tokens of N(0, 1) scaled per token by 2^(t mod 5 - 2), quantized per token and group here;
// weights as codes of N(0, 1), a scale per block around 1 / sqrt(K), each block its own.
Case MakeCase(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, Format f, uint32_t seed) {
  Case c{};
  c.T = T, c.H = H, c.I = I, c.E = E, c.k = k, c.f = f;
  c.bk = f.channel() ? std::max(H, I) : f.bk;
  c.nI = (I + f.bn - 1) / f.bn, c.nH = (H + f.bn - 1) / f.bn, c.GH = (H + c.bk - 1) / c.bk,
  c.GI = (I + c.bk - 1) / c.bk;
  std::vector<float> x = Gaussian(T * H, seed, 1.0f);
  c.x8.resize(static_cast<size_t>(T * H));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) x[t * H + h] = std::ldexp(x[t * H + h], static_cast<int>(t % 5) - 2);
    for (int64_t g = 0; g < c.GH; ++g) {
      const int64_t c0 = g * c.bk, n = std::min(H, c0 + c.bk) - c0;
      c.sx.push_back(QuantizeGroupRef(x.data() + t * H + c0, n, c.x8.data() + t * H + c0, f));
    }
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
  for (int64_t i = 0; i < E * 2 * c.nI * c.GH; ++i)
    c.s13.push_back(std::uniform_real_distribution<float>(0.25f, 4.0f)(rng) / std::sqrt(float(H)));
  for (int64_t i = 0; i < E * c.nH * c.GI; ++i)
    c.s2.push_back(std::uniform_real_distribution<float>(0.25f, 4.0f)(rng) / std::sqrt(float(I)));
  vt_test::RandomRouting(T, E, k, rng, c.ids, c.weights);
  return c;
}

// The op's output in float64 with F32 activations (g and u, then Silu(g) * u rounded to f32),
// and each output's magnitude Σ_j |w_j| Σ_i |a_i · w_down[h, i] · s_down|.
void Emulate(const Case& c, std::vector<double>& out, std::vector<double>& mag) {
  const int64_t H = c.H, I = c.I, k = c.k, bn = c.f.bn, bk = c.bk;
  auto dec = [](uint8_t b) { return vt_test::DecodeE4M3(b); };
  out.assign(static_cast<size_t>(c.T * H), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = c.ids[t * k + j];
      std::vector<float> a(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        const int64_t gate_row = e * 2 * c.nI + i / bn, up_row = e * 2 * c.nI + c.nI + i / bn;
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          const double xv = dec(c.x8[t * H + h]) * double(c.sx[t * c.GH + h / bk]);
          g += xv * dec(c.w13[(e * 2 * I + i) * H + h]) * c.s13[gate_row * c.GH + h / bk];
          u += xv * dec(c.w13[(e * 2 * I + I + i) * H + h]) * c.s13[up_row * c.GH + h / bk];
        }
        const float gf = static_cast<float>(g), uf = static_cast<float>(u);
        a[i] = static_cast<float>(gf / (1.0 + std::exp(-double(gf))) * uf);
      }
      std::vector<uint8_t> a8(static_cast<size_t>(I));
      std::vector<double> sa;
      for (int64_t g = 0; g < c.GI; ++g) {
        const int64_t c0 = g * bk, n = std::min(I, c0 + bk) - c0;
        sa.push_back(QuantizeGroupRef(a.data() + c0, n, a8.data() + c0, c.f));
      }
      for (int64_t h = 0; h < H; ++h) {
        const int64_t srow = e * c.nH + h / bn;
        double s = 0, m = 0;
        for (int64_t i = 0; i < I; ++i) {
          const double w = dec(c.w2[(e * H + h) * I + i]) * c.s2[srow * c.GI + i / bk];
          s += dec(a8[i]) * sa[i / bk] * w;
          m += std::fabs(double(a[i]) * w);
        }
        out[t * H + h] += c.weights[t * k + j] * s;
        mag[t * H + h] += c.weights[t * k + j] * m;
      }
    }
}

Tensor RunOp(const vt::Queue& q, const Case& c, DType out_dtype) {
  Tensor out = Tensor::Empty({c.T, c.H}, out_dtype);
  vt::MoeExpertsFp8GroupScaled(q, out, Tensor::FromHost(c.x8.data(), {c.T, c.H}, DType::kF8E4M3),
                               F32(c.sx, {c.T, c.GH}), Tensor::FromHost(c.ids.data(), {c.T, c.k}, DType::kI32),
                               F32(c.weights, {c.T, c.k}),
                               Tensor::FromHost(c.w13.data(), {c.E * 2 * c.I, c.H}, DType::kF8E4M3),
                               F32(c.s13, {c.E * 2 * c.nI, c.GH}),
                               Tensor::FromHost(c.w2.data(), {c.E * c.H, c.I}, DType::kF8E4M3),
                               F32(c.s2, {c.E * c.nH, c.GI}), c.f.bn, c.bk, c.f.amax_floor(), c.f.scale_floor());
  q.Synchronize();
  return out;
}

std::string Name(const Case& c) {
  return c.f.channel() ? std::string("per-channel") : vt::StrCat("blocks ", c.f.bn, "x", c.f.bk);
}

// Same rounding points as the emulation (F32 out), only the order of the f32 sums differs:
// a rare element whose g, u or a sits next to an e4m3fn boundary moves by a code step (2^-5
// of its magnitude); the rest agree to 1e-4 of theirs. The shapes end partway through a
// block in I (so gate and up have their own scale rows) and in H; 61 tokens give the experts
// products of many rows.
TEST(MoeExpertsFp8GroupScaled, MatchesTheFloat64EmulationOnEveryIsa) {
  const Case cases[] = {MakeCase(11, 200, 192, 6, 2, {128, 128}, 81), MakeCase(7, 72, 40, 5, 3, {16, 32}, 82),
                        MakeCase(9, 72, 40, 6, 2, {1, 0}, 83), MakeCase(1, 136, 56, 4, 1, {16, 16}, 84),
                        MakeCase(61, 72, 40, 4, 2, {1, 0}, 85), MakeCase(61, 200, 192, 3, 2, {128, 128}, 86)};
  for (const Case& c : cases) {
    std::vector<double> want, mag;
    Emulate(c, want, mag);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      const Tensor out = RunOp(vt_test::QueueFor(isa), c, DType::kF32);
      int bad = 0, loose = 0;
      for (int64_t i = 0; i < c.T * c.H; ++i) {
        const double err = std::fabs(out.data_as<float>()[i] - want[i]);
        loose += err > 1e-4 * mag[i] + 1e-7;
        if (err > 0x1p-5 * mag[i] + 1e-7 && bad++ < 5)
          ADD_FAILURE() << Name(c) << " " << vt::CpuIsaName(isa) << " output " << i << ": "
                        << out.data_as<float>()[i] << " vs " << want[i] << " (magnitude " << mag[i] << ")";
      }
      EXPECT_EQ(bad, 0) << Name(c) << " " << vt::CpuIsaName(isa);
      EXPECT_LE(loose, c.T * c.H / 50) << Name(c) << " " << vt::CpuIsaName(isa)
                                       << ": outputs off by more than summation order";
    }
  }
}

// MatmulFp8GroupScaled calls of the CPU kernels that count them (the x86 SIMD levels).
int64_t GemmCalls() {
  return vt::cpu::matmul::Fp8GroupScaledAvx2Calls() + vt::cpu::matmul::Fp8GroupScaledAvx512Calls();
}
bool KernelCounted(vt::CpuIsa isa) {
#if defined(__x86_64__)
  return isa >= vt::CpuIsa::kAvx2 && isa <= vt::CpuIsa::kAmx;
#else
  (void)isa;
  return false;
#endif
}

// A token's bytes in any batch (shared experts, repeats, any order) are its bytes alone, on
// every ISA level, for F32 and BF16 outputs, block and per-channel scales; batches of 2, 7
// and 19 tokens. The CPU multiplies each chosen expert's tokens at once (so its weights are
// read once), checked by counting the products.
TEST(MoeExpertsFp8GroupScaled, ATokensBytesInAnyBatchAreItsBytesAloneOnEveryIsa) {
  for (const Format f : {Format{128, 128}, Format{1, 0}}) {
    const Case pool = MakeCase(10, 200, 136, 4, 2, f, 91);
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
        c.sx.insert(c.sx.end(), pool.sx.begin() + t * pool.GH, pool.sx.begin() + (t + 1) * pool.GH);
        c.ids.insert(c.ids.end(), pool.ids.begin() + t * pool.k, pool.ids.begin() + (t + 1) * pool.k);
        c.weights.insert(c.weights.end(), pool.weights.begin() + t * pool.k, pool.weights.begin() + (t + 1) * pool.k);
      }
      return c;
    };
    for (vt::CpuIsa isa : vt_test::IsaLevels())
      for (DType out : {DType::kF32, DType::kBF16}) {
        const vt::Queue q = vt_test::QueueFor(isa);
        const size_t row = static_cast<size_t>(pool.H) * vt::DTypeSize(out);
        std::vector<std::vector<uint8_t>> alone;
        for (int64_t t = 0; t < pool.T; ++t) alone.push_back(vt_test::BytesOf(RunOp(q, subset({t}), out)));
        for (const std::vector<int64_t>& b : batches) {
          const Case c = subset(b);
          const int64_t calls_before = GemmCalls();
          const std::vector<uint8_t> got = vt_test::BytesOf(RunOp(q, c, out));
          // Each chosen expert's tokens in one product per projection (gate and up as one
          // where I is a multiple of the row block), however many tokens chose it.
          if (isa != vt::CpuIsa::kScalar && KernelCounted(isa)) {
            const int64_t experts = static_cast<int64_t>(std::set<int32_t>(c.ids.begin(), c.ids.end()).size());
            EXPECT_EQ(GemmCalls() - calls_before, experts * (c.I % c.f.bn == 0 ? 2 : 3))
                << Name(pool) << " " << vt::CpuIsaName(isa) << " batch of " << b.size();
          }
          for (size_t i = 0; i < b.size(); ++i) {
            const std::vector<uint8_t> in_batch(got.begin() + i * row, got.begin() + (i + 1) * row);
            EXPECT_EQ(vt_test::FirstDiff(alone[b[i]], in_batch), -1)
                << Name(pool) << " " << vt::CpuIsaName(isa) << " " << vt::DTypeName(out) << " batch of " << b.size()
                << ": token " << b[i] << " at " << i;
          }
        }
      }
  }
}

TEST(MoeExpertsFp8GroupScaled, ErrorsNameTheArgument) {
  const Case c = MakeCase(3, 200, 192, 4, 2, {128, 128}, 7);
  const vt::Queue q = vt::Queue::Cpu(1);
  const Tensor x8 = Tensor::FromHost(c.x8.data(), {c.T, c.H}, DType::kF8E4M3);
  const Tensor ids = Tensor::FromHost(c.ids.data(), {c.T, c.k}, DType::kI32);
  const Tensor w13 = Tensor::FromHost(c.w13.data(), {c.E * 2 * c.I, c.H}, DType::kF8E4M3);
  const Tensor w2 = Tensor::FromHost(c.w2.data(), {c.E * c.H, c.I}, DType::kF8E4M3);
  Tensor out = Tensor::Empty({c.T, c.H}, DType::kF32);
  auto run = [&](const Tensor& sx, const Tensor& s13, const Tensor& s2, int64_t bn, int64_t bk) {
    vt::MoeExpertsFp8GroupScaled(q, out, x8, sx, ids, F32(c.weights, {c.T, c.k}), w13, s13, w2, s2, bn, bk, 1e-10f,
                                 0.0f);
  };
  const Tensor sx = F32(c.sx, {c.T, c.GH}), s13 = F32(c.s13, {c.E * 2 * c.nI, c.GH}),
               s2 = F32(c.s2, {c.E * c.nH, c.GI});
  EXPECT_NO_THROW(run(sx, s13, s2, 128, 128));
  vt_test::ExpectErrorWith([&] { run(F32(c.sx, {c.T * c.GH, 1}), s13, s2, 128, 128); },
                           {"MoeExpertsFp8GroupScaled", "x_scales", "[3, 2]"});
  // One scale row per expert for gate and up together (I = 192 needs two blocks each).
  const std::vector<float> merged(static_cast<size_t>(c.E * 3 * c.GH), 1.0f);
  vt_test::ExpectErrorWith([&] { run(sx, F32(merged, {c.E * 3, c.GH}), s2, 128, 128); },
                           {"MoeExpertsFp8GroupScaled", "s_gate_up", "[12, 2]", "[16, 2]", "up scale rows"});
  vt_test::ExpectErrorWith([&] { run(sx, s13, F32(c.s13, {c.E * 2 * c.nI, c.GH}), 128, 128); },
                           {"MoeExpertsFp8GroupScaled", "s_down", "[8, 2]"});
  vt_test::ExpectErrorWith([&] { run(sx, s13, s2, 0, 128); }, {"MoeExpertsFp8GroupScaled", "block_n"});
  std::vector<int32_t> bad_ids = c.ids;
  bad_ids[3] = 4;
  for (vt::CpuIsa isa : vt_test::IsaLevels())
    vt_test::ExpectErrorWith([&] {
      vt::MoeExpertsFp8GroupScaled(vt_test::QueueFor(isa), out, x8, sx,
                                   Tensor::FromHost(bad_ids.data(), {c.T, c.k}, DType::kI32),
                                   F32(c.weights, {c.T, c.k}), w13, s13, w2, s2, 128, 128, 1e-10f, 0.0f);
    }, {"expert id 4", "[0, 4)"});
}

}  // namespace
