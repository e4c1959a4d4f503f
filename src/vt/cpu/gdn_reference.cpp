// Scalar definitions of the Gated DeltaNet ops (vt/ops/gdn.h), f32 throughout.
#include <algorithm>
#include <cmath>
#include <vector>

#include "vt/cpu/elem.h"
#include "vt/cpu/reference.h"
#include "vt/detail/numerics.h"

namespace vt::cpu::ref {

void CheckGdnBatch(const char* op, const Tensor& query_start, const Tensor& state_slots, int64_t T,
                   int64_t num_slots) {
  const int64_t S = state_slots.dim(0);
  const int32_t* qs = query_start.data_as<int32_t>();
  const int32_t* slot = state_slots.data_as<int32_t>();
  VT_CHECK(qs[0] == 0 && qs[S] == T, op, ": query_start runs from ", qs[0], " to ", qs[S],
           "; it must run from 0 to the ", T, " tokens of the batch");
  std::vector<bool> used(static_cast<size_t>(num_slots), false);
  for (int64_t s = 0; s < S; ++s) {
    VT_CHECK(qs[s + 1] >= qs[s], op, ": query_start[", s + 1, "] = ", qs[s + 1], " is below query_start[", s,
             "] = ", qs[s]);
    VT_CHECK(slot[s] >= -1 && slot[s] < num_slots, op, ": state_slots[", s, "] = ", slot[s], " is outside [-1, ",
             num_slots, ")");
    if (slot[s] < 0) continue;
    VT_CHECK(!used[slot[s]], op, ": state slot ", slot[s], " is named by two sequences (the second is ", s, ")");
    used[slot[s]] = true;
  }
}

void CausalConv1d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                  const Tensor& query_start, const Tensor& state_slots, int64_t c0, int64_t c1) {
  const int64_t C = x.dim(1), Kw = weight.dim(1), S = state_slots.dim(0);
  const int32_t* qs = query_start.data_as<int32_t>();
  const int32_t* slot = state_slots.data_as<int32_t>();
  const DType xd = x.dtype();
  std::vector<float> w(static_cast<size_t>(Kw)), hist(static_cast<size_t>(Kw - 1));
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t j = 0; j < Kw; ++j) w[j] = LoadFloat(weight.data(), weight.dtype(), c * Kw + j);
    for (int64_t s = 0; s < S; ++s) {
      if (slot[s] < 0) {
        for (int64_t t = qs[s]; t < qs[s + 1]; ++t) StoreFloat(out.data(), xd, t * C + c, 0.0f);
        continue;
      }
      const int64_t base = (static_cast<int64_t>(slot[s]) * C + c) * (Kw - 1);
      for (int64_t j = 0; j < Kw - 1; ++j) hist[j] = LoadFloat(conv_state.data(), xd, base + j);
      for (int64_t t = qs[s]; t < qs[s + 1]; ++t) {
        const float xt = LoadFloat(x.data(), xd, t * C + c);
        float y = 0.0f;
        for (int64_t j = 0; j < Kw - 1; ++j) y += w[j] * hist[j];
        y += w[Kw - 1] * xt;
        StoreFloat(out.data(), xd, t * C + c, numerics::Silu(y));
        for (int64_t j = 0; j + 1 < Kw - 1; ++j) hist[j] = hist[j + 1];
        hist[Kw - 2] = xt;
      }
      for (int64_t j = 0; j < Kw - 1; ++j) StoreFloat(conv_state.data(), xd, base + j, hist[j]);
    }
  }
}

namespace {

// torch.nn.functional.softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One (sequence, value head): its tokens' normalised q, k, their v, g and beta, in f32.
struct HeadInputs {
  int64_t L = 0, dk = 0, dv = 0;
  std::vector<float> q, k, v, g, beta;  // [L, dk], [L, dk], [L, dv], [L], [L]
};

HeadInputs LoadHead(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& a, const Tensor& b,
                    const Tensor& A_log, const Tensor& dt_bias, int64_t t0, int64_t t1, int64_t h) {
  HeadInputs in;
  const int64_t nk = query.dim(1), dk = query.dim(2), nv = value.dim(1), dv = value.dim(2), kh = h / (nv / nk);
  in.L = t1 - t0;
  in.dk = dk;
  in.dv = dv;
  in.q.resize(static_cast<size_t>(in.L * dk));
  in.k.resize(static_cast<size_t>(in.L * dk));
  in.v.resize(static_cast<size_t>(in.L * dv));
  in.g.resize(static_cast<size_t>(in.L));
  in.beta.resize(static_cast<size_t>(in.L));
  const float A = -std::exp(LoadFloat(A_log.data(), A_log.dtype(), h));
  const float bias = LoadFloat(dt_bias.data(), dt_bias.dtype(), h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < in.L; ++t) {
    const int64_t tok = t0 + t;
    auto l2 = [&](const Tensor& src, float* dst, float mul) {
      float ss = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        dst[i] = LoadFloat(src.data(), src.dtype(), (tok * nk + kh) * dk + i);
        ss += dst[i] * dst[i];
      }
      const float inv = 1.0f / std::sqrt(ss + 1e-6f);
      for (int64_t i = 0; i < dk; ++i) dst[i] = dst[i] * inv * mul;
    };
    l2(query, &in.q[t * dk], scale);
    l2(key, &in.k[t * dk], 1.0f);
    for (int64_t j = 0; j < dv; ++j) in.v[t * dv + j] = LoadFloat(value.data(), value.dtype(), (tok * nv + h) * dv + j);
    in.g[t] = A * Softplus(LoadFloat(a.data(), a.dtype(), tok * nv + h) + bias);
    in.beta[t] = 1.0f / (1.0f + std::exp(-LoadFloat(b.data(), b.dtype(), tok * nv + h)));
  }
  return in;
}

// Token by token (torch_recurrent_gated_delta_rule). o: [L, dv]; S: [dk, dv].
void Recurrent(const HeadInputs& in, float* S, float* o) {
  const int64_t dk = in.dk, dv = in.dv;
  std::vector<float> delta(static_cast<size_t>(dv));
  for (int64_t t = 0; t < in.L; ++t) {
    const float* k = &in.k[t * dk];
    const float* q = &in.q[t * dk];
    const float decay = std::exp(in.g[t]);
    for (int64_t e = 0; e < dk * dv; ++e) S[e] *= decay;
    for (int64_t j = 0; j < dv; ++j) {
      float kv = 0.0f;
      for (int64_t i = 0; i < dk; ++i) kv += S[i * dv + j] * k[i];
      delta[j] = (in.v[t * dv + j] - kv) * in.beta[t];
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += k[i] * delta[j];
    for (int64_t j = 0; j < dv; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * q[i];
      o[t * dv + j] = acc;
    }
  }
}

// Chunks of `chunk` tokens (torch_chunk_gated_delta_rule; a short last chunk is its zero
// padding, which adds nothing). o: [L, dv]; S: [dk, dv].
void Chunked(const HeadInputs& in, int64_t chunk, float* S, float* o) {
  const int64_t dk = in.dk, dv = in.dv;
  for (int64_t c0 = 0; c0 < in.L; c0 += chunk) {
    const int64_t n = std::min(chunk, in.L - c0);
    const float* q = &in.q[c0 * dk];
    const float* k = &in.k[c0 * dk];
    const float* v = &in.v[c0 * dv];
    const float* beta = &in.beta[c0];
    std::vector<float> gc(static_cast<size_t>(n));
    float run = 0.0f;
    for (int64_t i = 0; i < n; ++i) gc[i] = run += in.g[c0 + i];
    // A = -(k_beta kᵀ ⊙ decay), strictly lower; then the forward substitution and + I.
    std::vector<float> A(static_cast<size_t>(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) {
        float dot = 0.0f;
        for (int64_t d = 0; d < dk; ++d) dot += k[i * dk + d] * beta[i] * k[j * dk + d];
        A[i * n + j] = -(dot * std::exp(gc[i] - gc[j]));
      }
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t i = 1; i < n; ++i) {
      for (int64_t j = 0; j < i; ++j) row[j] = A[i * n + j];
      for (int64_t j = 0; j < i; ++j) {
        float acc = 0.0f;
        for (int64_t m = 0; m < i; ++m) acc += row[m] * A[m * n + j];
        A[i * n + j] = row[j] + acc;
      }
    }
    for (int64_t i = 0; i < n; ++i) A[i * n + i] += 1.0f;
    // U = A v_beta [n, dv]; W = A (k_beta exp(gc)) [n, dk].
    std::vector<float> U(static_cast<size_t>(n * dv), 0.0f), W(static_cast<size_t>(n * dk), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t m = 0; m < n; ++m) {
        const float aim = A[i * n + m];
        if (aim == 0.0f) continue;
        for (int64_t j = 0; j < dv; ++j) U[i * dv + j] += aim * (v[m * dv + j] * beta[m]);
        const float e = std::exp(gc[m]);
        for (int64_t d = 0; d < dk; ++d) W[i * dk + d] += aim * (k[m * dk + d] * beta[m] * e);
      }
    // v_new = U - W S; o = (q exp(gc)) S + (q kᵀ ⊙ decay, lower incl. diagonal) v_new.
    std::vector<float> vnew(static_cast<size_t>(n * dv));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < dv; ++j) {
        float acc = 0.0f;
        for (int64_t d = 0; d < dk; ++d) acc += W[i * dk + d] * S[d * dv + j];
        vnew[i * dv + j] = U[i * dv + j] - acc;
      }
    for (int64_t i = 0; i < n; ++i) {
      const float e = std::exp(gc[i]);
      for (int64_t j = 0; j < dv; ++j) {
        float inter = 0.0f;
        for (int64_t d = 0; d < dk; ++d) inter += q[i * dk + d] * e * S[d * dv + j];
        o[(c0 + i) * dv + j] = inter;
      }
      for (int64_t m = 0; m <= i; ++m) {
        float dot = 0.0f;
        for (int64_t d = 0; d < dk; ++d) dot += q[i * dk + d] * k[m * dk + d];
        const float att = dot * std::exp(gc[i] - gc[m]);
        for (int64_t j = 0; j < dv; ++j) o[(c0 + i) * dv + j] += att * vnew[m * dv + j];
      }
    }
    // S = S exp(gc_last) + Σ_m (k_m exp(gc_last - gc_m))ᵀ v_new_m.
    const float last = gc[n - 1], el = std::exp(last);
    for (int64_t e = 0; e < dk * dv; ++e) S[e] *= el;
    for (int64_t m = 0; m < n; ++m) {
      const float dm = std::exp(last - gc[m]);
      for (int64_t d = 0; d < dk; ++d) {
        const float kd = k[m * dk + d] * dm;
        for (int64_t j = 0; j < dv; ++j) S[d * dv + j] += kd * vnew[m * dv + j];
      }
    }
  }
}

}  // namespace

void GatedDeltaRule(const Tensor& out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& a,
                    const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& state,
                    const Tensor& query_start, const Tensor& state_slots, int chunk_size, int64_t w0, int64_t w1) {
  const int64_t nv = value.dim(1), dk = query.dim(2), dv = value.dim(2);
  const int32_t* qs = query_start.data_as<int32_t>();
  const int32_t* slot = state_slots.data_as<int32_t>();
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t s = w / nv, h = w % nv, t0 = qs[s], t1 = qs[s + 1];
    if (slot[s] < 0) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t j = 0; j < dv; ++j) StoreFloat(out.data(), out.dtype(), (t * nv + h) * dv + j, 0.0f);
      continue;
    }
    if (t1 == t0) continue;
    const HeadInputs in = LoadHead(query, key, value, a, b, A_log, dt_bias, t0, t1, h);
    float* S = state.data_as<float>() + (static_cast<int64_t>(slot[s]) * nv + h) * dk * dv;
    std::vector<float> o(static_cast<size_t>(in.L * dv));
    if (chunk_size == 0) {
      Recurrent(in, S, o.data());
    } else {
      Chunked(in, chunk_size, S, o.data());
    }
    for (int64_t t = 0; t < in.L; ++t)
      for (int64_t j = 0; j < dv; ++j)
        StoreFloat(out.data(), out.dtype(), ((t0 + t) * nv + h) * dv + j, o[t * dv + j]);
  }
}

}  // namespace vt::cpu::ref
