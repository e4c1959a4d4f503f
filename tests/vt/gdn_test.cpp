// The Gated DeltaNet ops (vt/ops/gdn.h) against float64 references written here from the math
// (HF transformers' Qwen3NextGatedDeltaNet: causal_conv1d + SiLU, l2norm, the gating, and the
// token-by-token delta rule), not from the kernels: mixed batches of prefill and decode rows,
// GQA-like heads (r = 2), dk != dv, state slots out of order with untouched neighbours,
// padding rows, a request resumed from its saved state, and the chunked form of the delta
// rule against its recurrence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "elementwise_test_util.h"
#include "vt/vt.h"

namespace {

using vt::DType;
using vt::Tensor;

std::vector<float> Randn(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<float> Uniform(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor F32(const std::vector<float>& v, const vt::Shape& shape) { return Tensor::FromHost(v.data(), shape, DType::kF32); }
Tensor I32(const std::vector<int32_t>& v) {
  return Tensor::FromHost(v.data(), {static_cast<int64_t>(v.size())}, DType::kI32);
}
std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = vt_test::ValueAt(t, i);
  return v;
}
Tensor Clone(const Tensor& t) { return Tensor::FromHost(t.data(), t.shape(), t.dtype()); }

std::vector<int32_t> Starts(const std::vector<int>& lens) {
  std::vector<int32_t> qs{0};
  for (int l : lens) qs.push_back(qs.back() + l);
  return qs;
}

// ---- float64 references ------------------------------------------------------------------

double Silu(double x) { return x / (1.0 + std::exp(-x)); }
double Softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// out [T, C], state [slots, C, Kw-1] updated.
void ConvRef(std::vector<double>& out, std::vector<double>& state, const std::vector<double>& x,
             const std::vector<double>& w, int64_t C, int64_t Kw, const std::vector<int32_t>& qs,
             const std::vector<int32_t>& slots) {
  for (size_t s = 0; s < slots.size(); ++s) {
    const int64_t L = qs[s + 1] - qs[s];
    for (int64_t c = 0; c < C; ++c) {
      if (slots[s] < 0) {
        for (int64_t t = 0; t < L; ++t) out[(qs[s] + t) * C + c] = 0.0;
        continue;
      }
      std::vector<double> xs;  // padded input: state columns then the tokens
      for (int64_t j = 0; j < Kw - 1; ++j) xs.push_back(state[(slots[s] * C + c) * (Kw - 1) + j]);
      for (int64_t t = 0; t < L; ++t) xs.push_back(x[(qs[s] + t) * C + c]);
      for (int64_t t = 0; t < L; ++t) {
        double y = 0;
        for (int64_t j = 0; j < Kw; ++j) y += w[c * Kw + j] * xs[t + j];
        out[(qs[s] + t) * C + c] = Silu(y);
      }
      for (int64_t j = 0; j < Kw - 1; ++j)
        state[(slots[s] * C + c) * (Kw - 1) + j] = xs[xs.size() - (Kw - 1) + j];
    }
  }
}

struct GdnBatch {
  int64_t T = 0, nk = 0, nv = 0, dk = 0, dv = 0, slots = 0;
  std::vector<int32_t> qs, slot;
  std::vector<float> q, k, v, a, b, A_log, dt_bias, state;
};

GdnBatch MakeGdn(const std::vector<int>& lens, const std::vector<int32_t>& slot, int64_t num_slots, int64_t nk,
                 int64_t nv, int64_t dk, int64_t dv, uint32_t seed) {
  std::mt19937 rng(seed);
  GdnBatch g;
  g.qs = Starts(lens);
  g.slot = slot;
  g.T = g.qs.back();
  g.nk = nk, g.nv = nv, g.dk = dk, g.dv = dv, g.slots = num_slots;
  g.q = Randn(static_cast<size_t>(g.T * nk * dk), rng);
  g.k = Randn(static_cast<size_t>(g.T * nk * dk), rng);
  g.v = Randn(static_cast<size_t>(g.T * nv * dv), rng);
  g.a = Randn(static_cast<size_t>(g.T * nv), rng, 0.5f);
  g.b = Randn(static_cast<size_t>(g.T * nv), rng);
  // A = exp(A_log) in [1, 16], softplus(dt_bias) in [0.001, 0.1] (HF's initialisation ranges).
  for (float A : Uniform(static_cast<size_t>(nv), rng, 1.0f, 16.0f)) g.A_log.push_back(std::log(A));
  for (float dt : Uniform(static_cast<size_t>(nv), rng, 0.001f, 0.1f)) g.dt_bias.push_back(std::log(std::expm1(dt)));
  g.state = Randn(static_cast<size_t>(num_slots * nv * dk * dv), rng, 0.3f);
  return g;
}

// Token by token in float64: out [T, nv, dv], state updated.
void GdnRef(const GdnBatch& g, std::vector<double>& out, std::vector<double>& state) {
  const int64_t r = g.nv / g.nk, dk = g.dk, dv = g.dv;
  out.assign(static_cast<size_t>(g.T * g.nv * dv), 0.0);
  for (size_t s = 0; s < g.slot.size(); ++s) {
    if (g.slot[s] < 0) continue;
    for (int64_t h = 0; h < g.nv; ++h) {
      double* S = &state[(g.slot[s] * g.nv + h) * dk * dv];
      const int64_t kh = h / r;
      for (int64_t t = g.qs[s]; t < g.qs[s + 1]; ++t) {
        std::vector<double> q(dk), k(dk);
        double sq = 0, sk = 0;
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = g.q[(t * g.nk + kh) * dk + i];
          k[i] = g.k[(t * g.nk + kh) * dk + i];
          sq += q[i] * q[i];
          sk += k[i] * k[i];
        }
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = q[i] / std::sqrt(sq + 1e-6) / std::sqrt(static_cast<double>(dk));
          k[i] = k[i] / std::sqrt(sk + 1e-6);
        }
        const double gate = -std::exp(static_cast<double>(g.A_log[h])) *
                            Softplus(static_cast<double>(g.a[t * g.nv + h]) + g.dt_bias[h]);
        const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(g.b[t * g.nv + h])));
        for (int64_t e = 0; e < dk * dv; ++e) S[e] *= std::exp(gate);
        std::vector<double> delta(dv);
        for (int64_t j = 0; j < dv; ++j) {
          double kv = 0;
          for (int64_t i = 0; i < dk; ++i) kv += S[i * dv + j] * k[i];
          delta[j] = beta * (g.v[(t * g.nv + h) * dv + j] - kv);
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += k[i] * delta[j];
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += S[i * dv + j] * q[i];
          out[(t * g.nv + h) * dv + j] = o;
        }
      }
    }
  }
}

// Runs the op on the batch's tokens [qs] with state `state` (updated); returns out.
Tensor RunGdn(const vt::Queue& q, const GdnBatch& g, const Tensor& state, int chunk) {
  Tensor out = Tensor::Empty({g.T, g.nv, g.dv}, DType::kF32);
  std::memset(out.data(), 0x5A, out.nbytes());
  vt::GatedDeltaRule(q, out, F32(g.q, {g.T, g.nk, g.dk}), F32(g.k, {g.T, g.nk, g.dk}), F32(g.v, {g.T, g.nv, g.dv}),
                     F32(g.a, {g.T, g.nv}), F32(g.b, {g.T, g.nv}), F32(g.A_log, {g.nv}), F32(g.dt_bias, {g.nv}), state,
                     I32(g.qs), I32(g.slot), chunk);
  return out;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err / (atol + rtol * std::fabs(want[i])));
    if (!(err <= atol + rtol * std::fabs(want[i])) && bad++ < 3)
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << " (" << got.size() << " elements)";
  std::cout << "[ " << what << ": worst error " << worst << " of the tolerance ]\n";
}

// Mixed batch: prefills longer than a chunk (70, 130), decode rows, a 3-token chunk, a padding
// row; slots out of order, slots 2, 4 and 6 named by no one.
const std::vector<int> kLens = {70, 1, 3, 1, 130, 2};
const std::vector<int32_t> kSlots = {5, 0, 3, 7, 1, -1};
constexpr int64_t kNumSlots = 8;

class GdnTest : public ::testing::TestWithParam<int> {};  // threads

TEST_P(GdnTest, GatedDeltaRuleMatchesFloat64Recurrence) {
  const vt::Queue q = vt::Queue::Cpu(GetParam());
  const GdnBatch g = MakeGdn(kLens, kSlots, kNumSlots, /*nk=*/2, /*nv=*/4, /*dk=*/24, /*dv=*/16, 7);
  std::vector<double> want_out, want_state(g.state.begin(), g.state.end());
  GdnRef(g, want_out, want_state);
  for (int chunk : {0, 64, 5}) {
    SCOPED_TRACE(::testing::Message() << "chunk_size " << chunk);
    const Tensor state = Clone(F32(g.state, {kNumSlots, g.nv, g.dk, g.dv}));
    const Tensor out = RunGdn(q, g, state, chunk);
    ExpectNear(Values(out), want_out, 2e-5, 2e-4, chunk == 0 ? "recurrent out" : "chunked out");
    ExpectNear(Values(state), want_state, 2e-5, 2e-4, chunk == 0 ? "recurrent state" : "chunked state");
    // Untouched slots keep their bytes; the padding row's outputs are zero.
    for (int64_t s : {2, 4, 6}) {
      const size_t n = static_cast<size_t>(g.nv * g.dk * g.dv);
      EXPECT_EQ(std::memcmp(state.data_as<float>() + s * n, g.state.data() + s * n, n * sizeof(float)), 0)
          << "slot " << s;
    }
    for (int64_t i = g.qs[5] * g.nv * g.dv; i < g.T * g.nv * g.dv; ++i)
      ASSERT_EQ(out.data_as<float>()[i], 0.0f) << "padding row element " << i;
  }
}

TEST_P(GdnTest, GatedDeltaRuleChunkedEqualsRecurrent) {
  const vt::Queue q = vt::Queue::Cpu(GetParam());
  const GdnBatch g = MakeGdn({200, 1, 64, 65}, {3, 1, 0, 2}, 4, /*nk=*/1, /*nv=*/2, /*dk=*/32, /*dv=*/48, 11);
  const Tensor s0 = Clone(F32(g.state, {4, g.nv, g.dk, g.dv})), s1 = Clone(s0);
  const std::vector<double> rec = Values(RunGdn(q, g, s0, 0)), chk = Values(RunGdn(q, g, s1, 64));
  ExpectNear(chk, rec, 1e-5, 1e-4, "chunk 64 vs recurrent out");
  ExpectNear(Values(s1), Values(s0), 1e-5, 1e-4, "chunk 64 vs recurrent state");
}

TEST_P(GdnTest, GatedDeltaRuleResumedEqualsOneGo) {
  const vt::Queue q = vt::Queue::Cpu(GetParam());
  // One request of 100 tokens in slot 1, run in one go, then as 37 + 1 + 62 over three steps
  // (another request, in slot 0, sharing the steps).
  const GdnBatch whole = MakeGdn({100}, {1}, 2, 2, 4, 16, 8, 3);
  for (int chunk : {0, 64}) {
    SCOPED_TRACE(::testing::Message() << "chunk_size " << chunk);
    const Tensor s_whole = Clone(F32(whole.state, {2, 4, 16, 8}));
    const std::vector<double> o_whole = Values(RunGdn(q, whole, s_whole, chunk));
    const Tensor s_steps = Clone(F32(whole.state, {2, 4, 16, 8}));
    std::vector<double> o_steps;
    int begin = 0;
    for (int len : {37, 1, 62}) {
      GdnBatch step = MakeGdn({2, len}, {0, 1}, 2, 2, 4, 16, 8, 100 + len);  // the other request's tokens first
      auto take = [&](std::vector<float>& dst, const std::vector<float>& src, int64_t width) {
        std::copy(src.begin() + begin * width, src.begin() + (begin + len) * width, dst.begin() + 2 * width);
      };
      take(step.q, whole.q, 2 * 16);
      take(step.k, whole.k, 2 * 16);
      take(step.v, whole.v, 4 * 8);
      take(step.a, whole.a, 4);
      take(step.b, whole.b, 4);
      step.A_log = whole.A_log;
      step.dt_bias = whole.dt_bias;
      const std::vector<double> o = Values(RunGdn(q, step, s_steps, chunk));
      o_steps.insert(o_steps.end(), o.begin() + 2 * 4 * 8, o.end());
      begin += len;
    }
    const std::vector<double> st_w = Values(s_whole), st_s = Values(s_steps);
    const size_t n = 4 * 16 * 8;
    if (chunk == 0) {  // the same operations in the same order: the same bytes
      EXPECT_EQ(o_steps, o_whole);
      EXPECT_TRUE(std::equal(st_w.begin() + n, st_w.end(), st_s.begin() + n));
    } else {
      ExpectNear(o_steps, o_whole, 1e-5, 1e-4, "resumed chunked out");
      ExpectNear(std::vector<double>(st_s.begin() + n, st_s.end()), std::vector<double>(st_w.begin() + n, st_w.end()),
                 1e-5, 1e-4, "resumed chunked state");
    }
  }
}

struct ConvCase {
  std::vector<int> lens;
  std::vector<int32_t> slots;
  int64_t num_slots, C, Kw;
};

TEST_P(GdnTest, CausalConv1dMatchesFloat64) {
  const vt::Queue q = vt::Queue::Cpu(GetParam());
  const ConvCase cases[] = {{kLens, kSlots, kNumSlots, 40, 4},
                            {{1, 1, 1}, {2, 0, 1}, 3, 17, 4},  // a decode step
                            {{5, 2, 1}, {1, 0, 2}, 3, 9, 2},
                            {{6}, {0}, 1, 8, 5}};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const ConvCase& cc : cases) {
      SCOPED_TRACE(::testing::Message() << vt::DTypeName(dt) << " C=" << cc.C << " Kw=" << cc.Kw);
      std::mt19937 rng(static_cast<uint32_t>(cc.C * 31 + cc.Kw));
      const std::vector<int32_t> qs = Starts(cc.lens);
      const int64_t T = qs.back();
      const Tensor x = vt_test::MakeTensor(Randn(static_cast<size_t>(T * cc.C), rng), {T, cc.C}, dt);
      const Tensor w = vt_test::MakeTensor(Randn(static_cast<size_t>(cc.C * cc.Kw), rng, 0.5f), {cc.C, cc.Kw}, dt);
      const Tensor st0 =
          vt_test::MakeTensor(Randn(static_cast<size_t>(cc.num_slots * cc.C * (cc.Kw - 1)), rng),
                              {cc.num_slots, cc.C, cc.Kw - 1}, dt);
      const Tensor st = Clone(st0);
      const Tensor out = Tensor::Empty({T, cc.C}, dt);
      std::memset(out.data(), 0x5A, out.nbytes());
      vt::CausalConv1d(q, out, x, w, st, I32(qs), I32(cc.slots));
      std::vector<double> want_out(static_cast<size_t>(T * cc.C)), want_state = Values(st0);
      ConvRef(want_out, want_state, Values(x), Values(w), cc.C, cc.Kw, qs, cc.slots);
      // f32 sums of Kw terms, then one rounding to the output dtype.
      const double rtol = dt == DType::kF32 ? 1e-6 : 0x1p-8;
      ExpectNear(Values(out), want_out, 1e-6, rtol, "conv out");
      // The state holds copies of inputs (bytes of x's dtype): exact; untouched slots keep theirs.
      EXPECT_EQ(Values(st), want_state);
    }
  }
}

TEST_P(GdnTest, CausalConv1dResumedEqualsOneGo) {
  const vt::Queue q = vt::Queue::Cpu(GetParam());
  const int64_t C = 12, Kw = 4, T = 9;
  std::mt19937 rng(5);
  const std::vector<float> xv = Randn(static_cast<size_t>(T * C), rng), wv = Randn(static_cast<size_t>(C * Kw), rng);
  const Tensor w = F32(wv, {C, Kw});
  const Tensor s_whole = F32(std::vector<float>(static_cast<size_t>(2 * C * (Kw - 1)), 0.0f), {2, C, Kw - 1});
  const Tensor o_whole = Tensor::Empty({T, C}, DType::kF32);
  vt::CausalConv1d(q, o_whole, F32(xv, {T, C}), w, s_whole, I32({0, static_cast<int32_t>(T)}), I32({1}));
  // 2 tokens (shorter than the kernel's history), then 1, then 6.
  const Tensor s_steps = F32(std::vector<float>(static_cast<size_t>(2 * C * (Kw - 1)), 0.0f), {2, C, Kw - 1});
  int64_t begin = 0;
  for (int64_t len : {2, 1, 6}) {
    const std::vector<float> part(xv.begin() + begin * C, xv.begin() + (begin + len) * C);
    const Tensor o = Tensor::Empty({len, C}, DType::kF32);
    vt::CausalConv1d(q, o, F32(part, {len, C}), w, s_steps, I32({0, static_cast<int32_t>(len)}), I32({1}));
    EXPECT_EQ(std::memcmp(o.data(), o_whole.data_as<float>() + begin * C, o.nbytes()), 0) << "tokens from " << begin;
    begin += len;
  }
  EXPECT_EQ(std::memcmp(s_steps.data(), s_whole.data(), s_whole.nbytes()), 0);
}

// A decode step padded to a CUDA graph's bucket (model_graphs.cpp): 5 real one-token rows
// and 3 padding rows with slot -1, over 8 slots of which 3 are named by no one. The padding
// rows' outputs are 0; every slot not named keeps its bytes (conv and delta-rule state); the
// real rows' outputs and states are byte for byte those of the same step without padding.
TEST_P(GdnTest, GraphPaddingRowsTouchNoState) {
  const vt::Queue q = vt::Queue::Cpu(GetParam());
  const std::vector<int> padded_lens(8, 1), real_lens(5, 1);
  const std::vector<int32_t> padded_slots = {6, 0, 3, 7, 1, -1, -1, -1};
  const std::vector<int32_t> real_slots(padded_slots.begin(), padded_slots.begin() + 5);
  const int64_t num_slots = 8, T = 8, Treal = 5;
  const int32_t unnamed[] = {2, 4, 5};
  {  // the delta rule (r = 2, dk != dv), both forms
    const GdnBatch padded = MakeGdn(padded_lens, padded_slots, num_slots, 2, 4, 16, 8, 21);
    GdnBatch real = padded;  // the first 5 rows of every input
    real.qs = Starts(real_lens);
    real.slot = real_slots;
    real.T = Treal;
    real.q.resize(static_cast<size_t>(Treal * 2 * 16));
    real.k.resize(static_cast<size_t>(Treal * 2 * 16));
    real.v.resize(static_cast<size_t>(Treal * 4 * 8));
    real.a.resize(static_cast<size_t>(Treal * 4));
    real.b.resize(static_cast<size_t>(Treal * 4));
    for (int chunk : {0, 64}) {
      SCOPED_TRACE(::testing::Message() << "GatedDeltaRule chunk_size " << chunk);
      const Tensor s_pad = Clone(F32(padded.state, {num_slots, 4, 16, 8})), s_real = Clone(s_pad);
      const Tensor o_pad = RunGdn(q, padded, s_pad, chunk), o_real = RunGdn(q, real, s_real, chunk);
      const size_t row = 4 * 8, per_slot = 4 * 16 * 8;
      EXPECT_EQ(std::memcmp(o_pad.data(), o_real.data(), Treal * row * sizeof(float)), 0)
          << "the real rows' outputs differ from the unpadded step's";
      for (size_t i = Treal * row; i < T * row; ++i)
        ASSERT_EQ(o_pad.data_as<float>()[i], 0.0f) << "padding output element " << i << " (row " << i / row << ")";
      EXPECT_EQ(std::memcmp(s_pad.data(), s_real.data(), s_pad.nbytes()), 0)
          << "the state after the padded step differs from the state after the unpadded step";
      for (int32_t s : unnamed)
        EXPECT_EQ(std::memcmp(s_pad.data_as<float>() + s * per_slot, padded.state.data() + s * per_slot,
                              per_slot * sizeof(float)),
                  0)
            << "slot " << s << ", named by no row, changed";
    }
  }
  for (DType dt : {DType::kF32, DType::kBF16}) {  // the conv
    SCOPED_TRACE(::testing::Message() << "CausalConv1d " << vt::DTypeName(dt));
    const int64_t C = 19, Kw = 4;
    std::mt19937 rng(77);
    const std::vector<float> xv = Randn(static_cast<size_t>(T * C), rng);
    const Tensor x_pad = vt_test::MakeTensor(xv, {T, C}, dt);
    const Tensor x_real = vt_test::MakeTensor(std::vector<float>(xv.begin(), xv.begin() + Treal * C), {Treal, C}, dt);
    const Tensor w = vt_test::MakeTensor(Randn(static_cast<size_t>(C * Kw), rng, 0.5f), {C, Kw}, dt);
    const Tensor st0 = vt_test::MakeTensor(Randn(static_cast<size_t>(num_slots * C * (Kw - 1)), rng),
                                           {num_slots, C, Kw - 1}, dt);
    const Tensor s_pad = Clone(st0), s_real = Clone(st0);
    const Tensor o_pad = Tensor::Empty({T, C}, dt), o_real = Tensor::Empty({Treal, C}, dt);
    std::memset(o_pad.data(), 0x5A, o_pad.nbytes());
    vt::CausalConv1d(q, o_pad, x_pad, w, s_pad, I32(Starts(padded_lens)), I32(padded_slots));
    vt::CausalConv1d(q, o_real, x_real, w, s_real, I32(Starts(real_lens)), I32(real_slots));
    const size_t row_bytes = static_cast<size_t>(C) * vt::DTypeSize(dt);
    EXPECT_EQ(std::memcmp(o_pad.data(), o_real.data(), Treal * row_bytes), 0)
        << "the real rows' outputs differ from the unpadded step's";
    for (int64_t i = Treal * C; i < T * C; ++i)
      ASSERT_EQ(vt_test::ValueAt(o_pad, i), 0.0) << "padding output element " << i << " (row " << i / C << ")";
    EXPECT_EQ(std::memcmp(s_pad.data(), s_real.data(), s_pad.nbytes()), 0)
        << "the conv state after the padded step differs from the state after the unpadded step";
    const size_t slot_bytes = static_cast<size_t>(C * (Kw - 1)) * vt::DTypeSize(dt);
    for (int32_t s : unnamed)
      EXPECT_EQ(std::memcmp(static_cast<const char*>(s_pad.data()) + s * slot_bytes,
                            static_cast<const char*>(st0.data()) + s * slot_bytes, slot_bytes),
                0)
          << "slot " << s << ", named by no row, changed";
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, GdnTest, ::testing::Values(1, 3));

// Qwen3NextRMSNorm in float64: y = x / sqrt(mean(x^2) + eps) * (1 + w), one rounding.
TEST(GdnOps, RmsNormZeroCentredMatchesFloat64) {
  const vt::Queue q = vt::Queue::Cpu(2);
  std::mt19937 rng(9);
  for (DType dt : {DType::kF32, DType::kBF16})
    for (bool with_res : {false, true}) {
      SCOPED_TRACE(::testing::Message() << vt::DTypeName(dt) << (with_res ? " residual" : ""));
      const int64_t R = 6, H = 96;
      const Tensor x = vt_test::MakeTensor(Randn(static_cast<size_t>(R * H), rng, 3.0f), {R, H}, dt);
      const Tensor w = vt_test::MakeTensor(Randn(static_cast<size_t>(H), rng, 0.2f), {H}, dt);
      const Tensor res0 = vt_test::MakeTensor(Randn(static_cast<size_t>(R * H), rng), {R, H}, dt);
      const Tensor res = Clone(res0), out = Tensor::Empty({R, H}, dt);
      vt::RmsNormZeroCentred(q, out, x, w, 1e-6f, with_res ? &res : nullptr);
      const std::vector<double> xv = Values(x), wv = Values(w), rv = Values(res0);
      std::vector<double> want(static_cast<size_t>(R * H)), want_res = rv;
      for (int64_t r = 0; r < R; ++r) {
        std::vector<double> s(static_cast<size_t>(H));
        double ss = 0;
        for (int64_t i = 0; i < H; ++i) {
          s[i] = xv[r * H + i];
          if (with_res) {  // the residual add in the model dtype, as HF's decoder layer
            s[i] = vt_test::ValueAt(vt_test::MakeTensor({static_cast<float>(s[i] + rv[r * H + i])}, {1}, dt), 0);
            want_res[r * H + i] = s[i];
          }
          ss += s[i] * s[i];
        }
        for (int64_t i = 0; i < H; ++i) want[r * H + i] = s[i] / std::sqrt(ss / H + 1e-6) * (1.0 + wv[i]);
      }
      ExpectNear(Values(out), want, 1e-6, dt == DType::kF32 ? 1e-5 : 0x1p-8, "zero-centred rmsnorm");
      if (with_res) {
        EXPECT_EQ(Values(res), want_res);
      }
    }
}

TEST(GdnOps, BadBatchesThrow) {
  const vt::Queue q = vt::Queue::Cpu(1);
  const Tensor x = F32(std::vector<float>(3 * 4, 1.0f), {3, 4}), w = F32(std::vector<float>(4 * 3, 1.0f), {4, 3});
  const Tensor st = F32(std::vector<float>(2 * 4 * 2, 0.0f), {2, 4, 2}), out = Tensor::Empty({3, 4}, DType::kF32);
  EXPECT_THROW(vt::CausalConv1d(q, out, x, w, st, I32({0, 1, 3}), I32({0, 0})), vt::Error);  // shared slot
  EXPECT_THROW(vt::CausalConv1d(q, out, x, w, st, I32({0, 1, 3}), I32({0, 2})), vt::Error);  // slot out of range
  EXPECT_THROW(vt::CausalConv1d(q, out, x, w, st, I32({0, 1, 3}), I32({0, -2})), vt::Error);  // padding is -1 only
  EXPECT_THROW(vt::CausalConv1d(q, out, x, w, st, I32({0, 1, 2}), I32({0, 1})), vt::Error);  // does not end at T
  EXPECT_THROW(vt::CausalConv1d(q, out, x, w, st, I32({0, 3}), I32({0, 1})), vt::Error);     // shape of query_start
  EXPECT_THROW(vt::CausalConv1d(q, out, x, F32(std::vector<float>(4 * 2, 1.0f), {4, 2}), st, I32({0, 3}), I32({0})),
               vt::Error);  // state width is not Kw - 1
  const GdnBatch g = MakeGdn({3}, {0}, 1, 2, 3, 8, 8, 1);  // 3 value heads over 2 key heads
  EXPECT_THROW(RunGdn(q, g, F32(g.state, {1, 3, 8, 8}), 0), vt::Error);
}

}  // namespace
