// A float64 reference forward of the hybrid Gated DeltaNet models (Qwen3-Next, Qwen3.5,
// Qwen3.5-MoE; docs/hybrid_models.md) whose linears are exact or emulated in online or static
// FP8 from the formats' definitions (docs/fp8_formats.md, DESIGN.md), for
// tests/model/online_fp8_hybrid_test.cpp and static_fp8_hybrid_test.cpp.
// Written from HF transformers' definitions of the layers, not from vtllm's code; it calls no
// vt op. Only the e4m3 grid comes from fp8_reference_forward.h (enumerated codes).
//
// Online FP8 as vtllm defines it, per linear of the loaded model:
//   - weight scale s_w = f32(amax / 448) over every stored tensor the linear reads, whole:
//     Qwen3-Next's q, k, v and z (row blocks of in_proj_qkvz) all take in_proj_qkvz's amax, b
//     and a in_proj_ba's; Qwen3.5's merged in_proj_qkv + in_proj_z one amax over both, in_proj_b
//     + in_proj_a likewise; the gated attention's q rows, gate rows, k and v one amax over q_proj,
//     k_proj and v_proj (vLLM's qkv_proj); gate/up (dense and shared expert) one over both;
//     q = e4m3(f32(w · f32(1/s_w)));
//   - each activation row (token) x rounded to f32: s = max(f32(amax / 448), 1/(448·512)),
//     q = e4m3(f32(x / s)); out = s · s_w · Σ q_x q_w in float64;
//   - experts: one weight scale over an expert's gate and up rows, one over its down rows;
//     the expert's input x per token, its down input per (token, expert) row;
//   - not quantized: lm_head, the embeddings, norms, conv1d, A_log, dt_bias, the routers and
//     the shared expert's gate.
// Block FP8 and per-channel FP8 checkpoints (dynamic activations; docs/fp8_formats.md): a stored
// F8E4M3 tensor's rows keep the scales they are stored with, whichever linear or shard reads
// them: block [bn, bk], row r and column group g (bk columns) take weight_scale_inv[r / bn, g];
// per-channel, row r takes weight_scale[r] over one group of K columns. Each activation row,
// rounded to f32, per group of its columns: block s = f32(max(amax, 1e-10) / 448), per-channel
// s = max(f32(amax / 448), 1 / (448 · 512)); q = e4m3(f32(x / s)); out = Σ_g s_x,g · s_w,g ·
// Σ_{k in g} q_x q_w in float64. A BF16 tensor (an excluded module) is exact.
// Everything else is float64: the GDN recurrence token by token, attention, norms.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fp8_reference_forward.h"
#include "model_oracle.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace vtllm::model::testing {

// kExact: every linear in float64 from the stored weights. kOnline: online FP8 of a BF16
// checkpoint, as above. kStatic: a static per-tensor FP8 checkpoint (ModelOpt or
// compressed-tensors) as vtllm's and vLLM's static path computes it: a linear whose stored
// tensors are F8E4M3 takes the largest of their weight scales, the others requantized to it
// (e4m3(f32(f32(q) * s_i) * f32(1 / s_max))), and the largest of their input scales s; x
// quantized to e4m3(clamp(f32(x) * f32(1 / s), ±448)); out = f32(s * s_max) * Σ q_x q_w. Routed
// experts: one input scale per projection kind over the block (the max of the experts' gate and
// up input scales, and of their down ones), each expert's gate/up merged as above. A BF16
// tensor in a static checkpoint (excluded modules) is exact.
// kBlock, kChannel: a block-FP8 or per-channel FP8 checkpoint, as above.
enum class HybridMode { kExact, kOnline, kStatic, kBlock, kChannel };

class HybridReference {
 public:
  // perturbation: each quantized activation is multiplied by 1 + perturbation (in float64)
  // before it is rounded to f32 and quantized; a few ulps show how far activations that sit
  // on e4m3 rounding boundaries move the logits when they flip code.
  // block: kBlock's [bn, bk] (weight_block_size).
  HybridReference(const std::string& dir, HybridMode mode, double perturbation = 0.0,
                  std::array<int64_t, 2> block = {0, 0})
      : cfg_(ModelConfig::FromDir(dir)),
        ckpt_(Checkpoint::Open(dir)),
        mode_(mode),
        perturbation_(perturbation),
        block_(block) {
    fused_ = cfg_.architecture == "Qwen3NextForCausalLM";
    // The multimodal wrapper's layout (Qwen3.5's releases) keeps the text model's weights
    // under model.language_model.
    root_ = ckpt_.Has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  }

  // Logits [T, V] of every position of `ids` from position 0.
  std::vector<double> Logits(const std::vector<int32_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), H = cfg_.hidden_size;
    const std::vector<double>& embed = W(root_ + "embed_tokens.weight");
    std::vector<double> x(static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t) std::copy_n(embed.begin() + ids[t] * H, H, x.begin() + t * H);
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = root_ + "layers." + std::to_string(l) + ".";
      std::vector<double> n = ZcNorm(x, W(p + "input_layernorm.weight"), T, H);
      const std::vector<double> a = cfg_.layer_types[l] == "linear_attention" ? Gdn(p + "linear_attn.", n, T)
                                                                               : Attention(p + "self_attn.", n, T);
      for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
      n = ZcNorm(x, W(p + "post_attention_layernorm.weight"), T, H);
      const std::vector<double> m = cfg_.num_experts > 0 ? Moe(p + "mlp.", n, T) : Mlp(p + "mlp.", n, T);
      for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
    }
    const std::vector<double> f = ZcNorm(x, W(root_ + "norm.weight"), T, H);
    return MatmulT(f, W("lm_head.weight"), T, cfg_.vocab_size, H);
  }

 private:
  // A weight as stored, widened; cached.
  const std::vector<double>& W(const std::string& name) {
    auto it = w_.find(name);
    if (it != w_.end()) return it->second;
    const vt::Tensor t = ckpt_.Get(name);
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = t.dtype() == vt::DType::kF32      ? t.data_as<float>()[i]
             : t.dtype() == vt::DType::kF8E4M3 ? E4m3Decode(t.data_as<uint8_t>()[i])
                                               : vt::Bf16ToFloat(t.data_as<uint16_t>()[i]);
    return w_[name] = std::move(v);
  }
  bool IsFp8(const std::string& name) const { return ckpt_.Info(name).dtype == vt::DType::kF8E4M3; }
  // A scalar scale of the weight `name` ("P.weight" -> "P.weight_scale" / "P.input_scale").
  float Scale(const std::string& weight, const char* which) const {
    const vt::Tensor t = ckpt_.Get(weight.substr(0, weight.size() - 6) + which);
    return t.data_as<float>()[0];
  }
  double Amax(const std::string& name) {
    double m = 0;
    for (double v : W(name)) m = std::max(m, std::fabs(v));
    return m;
  }

  static std::vector<double> MatmulT(const std::vector<double>& x, const std::vector<double>& w, int64_t T,
                                     int64_t N, int64_t K) {
    return MatmulTRef(x, w, T, N, K);
  }

  // One activation row in place: s = max(f32(amax / 448), 1 / (448 * 512)) of the row rounded
  // to f32, each value e4m3(f32(x / s)); returns s.
  static double QuantizeRow(double* x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<float>(x[i])));
    const float s = std::max(m / 448.0f, 1.0f / (448.0f * 512.0f));
    for (int64_t i = 0; i < n; ++i) x[i] = E4m3(static_cast<float>(x[i]) / s);
    return s;
  }

  // y [T, rows.size()] = x [T, K] · Wᵀ, W the rows `rows` of the stored weights `tensors`
  // stacked in order (each row an index into that stack); in FP8 mode with one weight scale
  // over all of `tensors`, whole.
  // Static mode: input_scale, when not 0, replaces the tensors' own (the experts' block-wide one).
  std::vector<double> Linear(const std::vector<std::string>& tensors, const std::vector<int64_t>& rows,
                             const std::vector<double>& x, int64_t T, int64_t K, float input_scale = 0.0f) {
    std::vector<double> stack;
    for (const std::string& t : tensors) stack.insert(stack.end(), W(t).begin(), W(t).end());
    const int64_t N = static_cast<int64_t>(rows.size());
    std::vector<double> w(static_cast<size_t>(N * K));
    for (int64_t n = 0; n < N; ++n) std::copy_n(stack.begin() + rows[n] * K, K, w.begin() + n * K);
    if (mode_ == HybridMode::kExact || (mode_ != HybridMode::kOnline && !IsFp8(tensors[0])))
      return MatmulT(x, w, T, N, K);
    std::vector<double> xq = x, srow(static_cast<size_t>(T));
    for (double& v : xq) v *= 1.0 + perturbation_;
    if (mode_ == HybridMode::kBlock || mode_ == HybridMode::kChannel) return GroupScaled(tensors, rows, xq, w, T, K);
    if (mode_ == HybridMode::kStatic) {
      float s_max = 0.0f, s_in = input_scale;
      for (const std::string& t : tensors) {
        s_max = std::max(s_max, Scale(t, "weight_scale"));
        if (input_scale == 0.0f) s_in = std::max(s_in, Scale(t, "input_scale"));
      }
      // Requantize the rows of each tensor whose scale is not the largest.
      std::vector<float> row_scale;
      for (const std::string& t : tensors) {
        const int64_t rows_t = static_cast<int64_t>(W(t).size()) / K;
        row_scale.insert(row_scale.end(), static_cast<size_t>(rows_t), Scale(t, "weight_scale"));
      }
      const float inv_max = 1.0f / s_max, inv_in = 1.0f / s_in;
      for (int64_t n = 0; n < N; ++n) {
        const float ws = row_scale[rows[n]];
        if (ws == s_max) continue;
        for (int64_t k = 0; k < K; ++k)
          w[n * K + k] = E4m3(static_cast<float>(static_cast<float>(w[n * K + k]) * ws) * inv_max);
      }
      for (double& v : xq) v = E4m3(std::clamp(static_cast<float>(v) * inv_in, -448.0f, 448.0f));
      std::vector<double> y = MatmulT(xq, w, T, N, K);
      const double alpha = s_in * s_max;  // f32 product, as the caller folds it
      for (double& v : y) v *= alpha;
      return y;
    }
    // The tensors' stack quantized once (the weights do not change between calls).
    std::string key;
    for (const std::string& t : tensors) key += t + "|";
    auto it = online_.find(key);
    if (it == online_.end()) {
      double amax = 0;
      for (const std::string& t : tensors) amax = std::max(amax, Amax(t));
      float s = static_cast<float>(amax) / 448.0f;
      if (!(s > 0.0f)) s = 1.0f;
      const float inv = 1.0f / s;
      for (double& v : stack) v = E4m3(static_cast<float>(v) * inv);
      it = online_.emplace(key, std::make_pair(std::move(stack), s)).first;
    }
    const float sw = it->second.second;
    for (int64_t n = 0; n < N; ++n) std::copy_n(it->second.first.begin() + rows[n] * K, K, w.begin() + n * K);
    for (int64_t t = 0; t < T; ++t) srow[t] = QuantizeRow(xq.data() + t * K, K);
    std::vector<double> y = MatmulT(xq, w, T, N, K);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) y[t * N + n] *= srow[t] * sw;
    return y;
  }
  // kBlock / kChannel: y = Σ_g s_x,g · s_w,g · Σ_{k in g} q_x q_w, w the rows `rows` of the
  // stack of `tensors` as stored (decoded e4m3), each row with its stored tensor's scale row.
  std::vector<double> GroupScaled(const std::vector<std::string>& tensors, const std::vector<int64_t>& rows,
                                  const std::vector<double>& x, const std::vector<double>& w, int64_t T, int64_t K) {
    const bool block = mode_ == HybridMode::kBlock;
    const int64_t bn = block ? block_[0] : 1, bk = block ? block_[1] : K, G = (K + bk - 1) / bk;
    std::vector<const double*> row_scales;  // per row of the stack: its G weight scales
    for (const std::string& t : tensors) {
      const std::vector<double>& sc = W(t.substr(0, t.size() - 6) + (block ? "weight_scale_inv" : "weight_scale"));
      const int64_t stored_rows = static_cast<int64_t>(W(t).size()) / K;
      for (int64_t r = 0; r < stored_rows; ++r) row_scales.push_back(sc.data() + (r / bn) * G);
    }
    const int64_t N = static_cast<int64_t>(rows.size());
    std::vector<double> y(static_cast<size_t>(T * N)), q(static_cast<size_t>(K)), sx(static_cast<size_t>(G));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < G; ++g) {
        const int64_t k0 = g * bk, k1 = std::min(K, k0 + bk);
        float m = 0.0f;
        for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(static_cast<float>(x[t * K + k])));
        const float s = block ? std::max(m, 1e-10f) / 448.0f : std::max(m / 448.0f, 1.0f / (448.0f * 512.0f));
        for (int64_t k = k0; k < k1; ++k) q[k] = E4m3(static_cast<float>(x[t * K + k]) / s);
        sx[g] = s;
      }
      for (int64_t n = 0; n < N; ++n) {
        const double* ws = row_scales[rows[n]];
        double acc = 0;
        for (int64_t g = 0; g < G; ++g) {
          double d = 0;
          for (int64_t k = g * bk; k < std::min(K, (g + 1) * bk); ++k) d += q[k] * w[n * K + k];
          acc += d * sx[g] * ws[g];
        }
        y[t * N + n] = acc;
      }
    }
    return y;
  }

  static std::vector<int64_t> Range(int64_t begin, int64_t end) {
    std::vector<int64_t> r;
    for (int64_t i = begin; i < end; ++i) r.push_back(i);
    return r;
  }
  // The whole of `tensors` (N rows in all).
  std::vector<double> Full(const std::vector<std::string>& tensors, const std::vector<double>& x, int64_t T,
                           int64_t K, float input_scale = 0.0f) {
    int64_t rows = 0;
    for (const std::string& t : tensors) rows += static_cast<int64_t>(W(t).size()) / K;
    return Linear(tensors, Range(0, rows), x, T, K, input_scale);
  }

  // x_hat * (1 + w) per row of n.
  std::vector<double> ZcNorm(const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
                             int64_t n) const {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
      const double inv = 1.0 / std::sqrt(ss / n + cfg_.rms_norm_eps);
      for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * inv * (1.0 + w[i]);
    }
    return y;
  }
  static double Silu(double v) { return v / (1.0 + std::exp(-v)); }
  static double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

  // Gated DeltaNet (HF's torch fallback, written out): projections, causal depthwise conv +
  // SiLU over q|k|v, L2-normalised q, k (q scaled by dk^-0.5), the delta rule per value head,
  // gated RMSNorm (weight as is) times silu(z), out_proj.
  std::vector<double> Gdn(const std::string& p, const std::vector<double>& x, int64_t T) {
    const int64_t H = cfg_.hidden_size, nk = cfg_.linear_num_key_heads, nv = cfg_.linear_num_value_heads;
    const int64_t dk = cfg_.linear_key_head_dim, dv = cfg_.linear_value_head_dim, r = nv / nk;
    const int64_t Ck = nk * dk, Cv = nv * dv, C = 2 * Ck + Cv, Kc = cfg_.linear_conv_kernel_dim;
    std::vector<double> mixed(static_cast<size_t>(T * C)), z(static_cast<size_t>(T * Cv));
    std::vector<double> bb(static_cast<size_t>(T * nv)), aa(static_cast<size_t>(T * nv));
    if (fused_) {
      // Per key-head group g: [q_g | k_g | v_g | z_g] and [b_g | a_g].
      const int64_t Wg = 2 * dk + 2 * r * dv;
      std::vector<int64_t> rq, rk, rv, rz, rb, ra;
      for (int64_t g = 0; g < nk; ++g) {
        for (int64_t i = 0; i < dk; ++i) rq.push_back(g * Wg + i), rk.push_back(g * Wg + dk + i);
        for (int64_t i = 0; i < r * dv; ++i)
          rv.push_back(g * Wg + 2 * dk + i), rz.push_back(g * Wg + 2 * dk + r * dv + i);
        for (int64_t i = 0; i < r; ++i) rb.push_back(g * 2 * r + i), ra.push_back(g * 2 * r + r + i);
      }
      const std::vector<std::string> qkvz = {p + "in_proj_qkvz.weight"}, ba = {p + "in_proj_ba.weight"};
      const std::vector<double> q = Linear(qkvz, rq, x, T, H), k = Linear(qkvz, rk, x, T, H);
      const std::vector<double> v = Linear(qkvz, rv, x, T, H);
      z = Linear(qkvz, rz, x, T, H);
      bb = Linear(ba, rb, x, T, H);
      aa = Linear(ba, ra, x, T, H);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(q.begin() + t * Ck, Ck, mixed.begin() + t * C);
        std::copy_n(k.begin() + t * Ck, Ck, mixed.begin() + t * C + Ck);
        std::copy_n(v.begin() + t * Cv, Cv, mixed.begin() + t * C + 2 * Ck);
      }
    } else {
      const std::vector<double> qkvz = Full({p + "in_proj_qkv.weight", p + "in_proj_z.weight"}, x, T, H);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(qkvz.begin() + t * (C + Cv), C, mixed.begin() + t * C);
        std::copy_n(qkvz.begin() + t * (C + Cv) + C, Cv, z.begin() + t * Cv);
      }
      const std::vector<double> ba = Full({p + "in_proj_b.weight", p + "in_proj_a.weight"}, x, T, H);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(ba.begin() + t * 2 * nv, nv, bb.begin() + t * nv);
        std::copy_n(ba.begin() + t * 2 * nv + nv, nv, aa.begin() + t * nv);
      }
    }
    const std::vector<double>& cw = W(p + "conv1d.weight");  // [C, 1, Kc]
    std::vector<double> conv(mixed.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t j = 0; j < Kc; ++j) {
          const int64_t u = t - (Kc - 1) + j;
          if (u >= 0) s += cw[c * Kc + j] * mixed[u * C + c];
        }
        conv[t * C + c] = Silu(s);
      }
    const std::vector<double>& A_log = W(p + "A_log");
    const std::vector<double>& dt_bias = W(p + "dt_bias");
    const std::vector<double>& nw = W(p + "norm.weight");
    std::vector<double> core(static_cast<size_t>(T * Cv));
    for (int64_t h = 0; h < nv; ++h) {
      const int64_t kh = h / r;
      std::vector<double> S(static_cast<size_t>(dk * dv), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> q(conv.begin() + t * C + kh * dk, conv.begin() + t * C + (kh + 1) * dk);
        std::vector<double> k(conv.begin() + t * C + Ck + kh * dk, conv.begin() + t * C + Ck + (kh + 1) * dk);
        const double* v = &conv[t * C + 2 * Ck + h * dv];
        double sq = 0, sk = 0;
        for (int64_t i = 0; i < dk; ++i) sq += q[i] * q[i], sk += k[i] * k[i];
        for (int64_t i = 0; i < dk; ++i) {
          q[i] *= 1.0 / std::sqrt(sq + 1e-6) / std::sqrt(static_cast<double>(dk));
          k[i] *= 1.0 / std::sqrt(sk + 1e-6);
        }
        const double beta = Sigmoid(bb[t * nv + h]);
        const double a = aa[t * nv + h] + dt_bias[h];
        const double softplus = a > 20 ? a : std::log1p(std::exp(a));
        const double decay = std::exp(-std::exp(A_log[h]) * softplus);
        for (double& s : S) s *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          double kv = 0;
          for (int64_t i = 0; i < dk; ++i) kv += S[i * dv + j] * k[i];
          const double d = beta * (v[j] - kv);
          for (int64_t i = 0; i < dk; ++i) S[i * dv + j] += k[i] * d;
        }
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += S[i * dv + j] * q[i];
          core[t * Cv + h * dv + j] = o;
        }
      }
    }
    for (int64_t row = 0; row < T * nv; ++row) {
      double ss = 0;
      for (int64_t j = 0; j < dv; ++j) ss += core[row * dv + j] * core[row * dv + j];
      const double inv = 1.0 / std::sqrt(ss / dv + cfg_.rms_norm_eps);
      for (int64_t j = 0; j < dv; ++j) core[row * dv + j] *= inv * nw[j] * Silu(z[row * dv + j]);
    }
    return Full({p + "out_proj.weight"}, core, T, Cv);
  }

  // Gated attention: q_proj's rows per head [q_h | gate_h], zero-centred q/k norms, partial
  // rotary (HF's rotate_half on the first R dims), causal GQA softmax, times sigmoid(gate).
  std::vector<double> Attention(const std::string& p, const std::vector<double>& x, int64_t T) {
    const int64_t H = cfg_.hidden_size, D = cfg_.head_dim, Hq = cfg_.num_attention_heads,
                  Hk = cfg_.num_key_value_heads;
    const int64_t R = static_cast<int64_t>(std::lround(cfg_.partial_rotary_factor * D));
    // vLLM's qkv_proj: q_proj (q and gate rows per head), k_proj, v_proj as one merge.
    std::vector<int64_t> rq, rg, rk, rv;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < D; ++i) rq.push_back(h * 2 * D + i), rg.push_back(h * 2 * D + D + i);
    for (int64_t i = 0; i < Hk * D; ++i) rk.push_back(Hq * 2 * D + i), rv.push_back(Hq * 2 * D + Hk * D + i);
    const std::vector<std::string> qkv = {p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"};
    std::vector<double> q = Linear(qkv, rq, x, T, H);
    const std::vector<double> gate = Linear(qkv, rg, x, T, H);
    std::vector<double> k = Linear(qkv, rk, x, T, H);
    const std::vector<double> v = Linear(qkv, rv, x, T, H);
    q = ZcNorm(q, W(p + "q_norm.weight"), T * Hq, D);
    k = ZcNorm(k, W(p + "k_norm.weight"), T * Hk, D);
    RopeNeox(q, T, Hq, D, R, cfg_.rope_theta);
    RopeNeox(k, T, Hk, D, R, cfg_.rope_theta);
    std::vector<double> att(static_cast<size_t>(T * Hq * D), 0.0);
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hk);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += q[(t * Hq + h) * D + e] * k[(u * Hk + kh) * D + e];
          mx = std::max(mx, s[u] = d / std::sqrt(static_cast<double>(D)));
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t e = 0; e < D; ++e) att[(t * Hq + h) * D + e] += s[u] / sum * v[(u * Hk + kh) * D + e];
      }
    }
    for (size_t i = 0; i < att.size(); ++i) att[i] *= Sigmoid(gate[i]);
    return Full({p + "o_proj.weight"}, att, T, Hq * D);
  }

  // SwiGLU of `m` ("...mlp.", "...shared_expert." or "...experts.E.").
  std::vector<double> Mlp(const std::string& m, const std::vector<double>& x, int64_t T, float in13 = 0.0f,
                          float in2 = 0.0f) {
    const int64_t H = cfg_.hidden_size;
    const std::string g = m + "gate_proj.weight", u = m + "up_proj.weight", d = m + "down_proj.weight";
    const int64_t I = static_cast<int64_t>(W(g).size()) / H;
    const std::vector<double> gu = Full({g, u}, x, T, H, in13);
    std::vector<double> act(static_cast<size_t>(T * I));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < I; ++i) act[t * I + i] = Silu(gu[t * 2 * I + i]) * gu[t * 2 * I + I + i];
    return Full({d}, act, T, I, in2);
  }

  // Softmax router, top k (ties to the lower index), renormalised (Qwen3.5-MoE always; Qwen3-Next
  // when norm_topk_prob), per-expert SwiGLU (each token a row of its own), plus
  // sigmoid(shared_expert_gate · x) times the shared expert.
  std::vector<double> Moe(const std::string& m, const std::vector<double>& x, int64_t T) {
    const int64_t H = cfg_.hidden_size, E = cfg_.num_experts, k = cfg_.num_experts_per_tok;
    const bool renorm = cfg_.norm_topk_prob || cfg_.architecture.rfind("Qwen3_5Moe", 0) == 0;
    const std::vector<double> logits = MatmulT(x, W(m + "gate.weight"), T, E, H);
    auto expert = [&](int64_t e) { return m + "experts." + std::to_string(e) + "."; };
    float in13 = 0.0f, in2 = 0.0f;
    if (mode_ == HybridMode::kStatic && IsFp8(expert(0) + "gate_proj.weight"))
      for (int64_t e = 0; e < E; ++e) {
        in13 = std::max({in13, Scale(expert(e) + "gate_proj.weight", "input_scale"),
                         Scale(expert(e) + "up_proj.weight", "input_scale")});
        in2 = std::max(in2, Scale(expert(e) + "down_proj.weight", "input_scale"));
      }
    std::vector<double> out(static_cast<size_t>(T * H), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> pr(logits.begin() + t * E, logits.begin() + (t + 1) * E);
      const double mx = *std::max_element(pr.begin(), pr.end());
      double sum = 0;
      for (double& v : pr) sum += (v = std::exp(v - mx));
      for (double& v : pr) v /= sum;
      std::vector<int64_t> order = Range(0, E);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pr[a] > pr[b]; });
      double top = 0;
      for (int64_t j = 0; j < k; ++j) top += pr[order[j]];
      const std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = order[j];
        const std::vector<double> y = Mlp(expert(e), xt, 1, in13, in2);
        const double wgt = renorm ? pr[e] / top : pr[e];
        for (int64_t h = 0; h < H; ++h) out[t * H + h] += wgt * y[h];
      }
    }
    if (cfg_.shared_expert_intermediate_size > 0) {
      const std::vector<double> s = Mlp(m + "shared_expert.", x, T);
      const std::vector<double> sg = MatmulT(x, W(m + "shared_expert_gate.weight"), T, 1, H);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) out[t * H + h] += Sigmoid(sg[t]) * s[t * H + h];
    }
    return out;
  }

  ModelConfig cfg_;
  Checkpoint ckpt_;
  HybridMode mode_;
  bool fused_ = false;
  std::string root_;
  double perturbation_ = 0.0;
  std::array<int64_t, 2> block_;
  std::map<std::string, std::vector<double>> w_;
  std::map<std::string, std::pair<std::vector<double>, float>> online_;  // quantized stacks, scale
};

// Greedy decoding of `steps` tokens after `prompt` (prefill, then one decode step a token)
// against the reference: each step's logits must agree to `tol` until the first step where they
// do not (an e4m3 code flip, see the tests) or the reference's top-2 margin is under `near_tie`;
// up to there the tokens are the reference's. Returns the steps compared; `flipped` tells
// whether it stopped at a flip.
inline int GreedyAgainstReference(Model& model, HybridReference& ref, const std::vector<int32_t>& prompt, int steps,
                                  double tol, double near_tie, bool* flipped) {
  const int64_t V = model.vocab_size();
  KvCache cache = model.MakeKvCache(static_cast<int64_t>(prompt.size()) + steps + 1, 16);
  SequenceKv seq;
  std::vector<int64_t> pos(prompt.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  std::vector<float> logits = model.Forward(prompt, pos, {&cache, &seq});
  std::vector<int32_t> ids = prompt;
  *flipped = false;
  for (int i = 0; i < steps; ++i) {
    const std::vector<double> l = ref.Logits(ids);
    const double* last = l.data() + (static_cast<int64_t>(ids.size()) - 1) * V;
    double d = 0;
    for (int64_t v = 0; v < V; ++v) d = std::max(d, std::fabs(logits[v] - last[v]));
    if (!(d <= tol)) {
      *flipped = true;
      return i;
    }
    const int64_t top = std::max_element(last, last + V) - last;
    double second = -INFINITY;
    for (int64_t v = 0; v < V; ++v)
      if (v != top) second = std::max(second, last[v]);
    if (last[top] - second < near_tie) return i;
    const int32_t ours = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(ours, top) << "step " << i;
    if (ours != top) return i;
    ids.push_back(ours);
    const int64_t p = seq.num_tokens;
    logits = model.Forward(std::vector<int32_t>{ours}, std::vector<int64_t>{p}, {&cache, &seq});
  }
  return steps;
}

// `model`'s f32 logits of each prompt of `prompts` against the emulation: max |ours -
// emulation| per position, split at the prompt's first position off by more than 1e-4 (a code
// flip); the prompts whose position 0 is off; how far the emulation is from the unquantized
// forward `exact` (when given); and, for the prompts of up to 30 tokens, the greedy decode
// steps equal to the emulation's (GreedyAgainstReference, 6 steps, near-tie `near_tie`).
struct EmulationComparison {
  int before = 0, after = 0, greedy_steps = 0;
  double worst = 0, fp8_vs_exact = 0;
  std::vector<std::vector<int32_t>> flipped_at_0;
};

inline EmulationComparison CompareWithEmulation(Model& model, HybridReference& emu, HybridReference* exact,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                double near_tie = 0.05) {
  const int64_t V = model.vocab_size();
  EmulationComparison c;
  for (const std::vector<int32_t>& prompt : prompts) {
    const int64_t T = static_cast<int64_t>(prompt.size());
    const std::vector<float> got = PromptLogits(model, prompt);
    const std::vector<double> ref = emu.Logits(prompt);
    const std::vector<double> ex = exact ? exact->Logits(prompt) : ref;
    bool flipped = false;
    for (int64_t t = 0; t < T; ++t) {
      const double d = RowDiff(got, ref, ex, t, V, c.fp8_vs_exact);
      flipped = flipped || !(d <= 1e-4);
      if (t == 0 && flipped) c.flipped_at_0.push_back(prompt);
      if (!flipped) c.worst = std::max(c.worst, d);
      (flipped ? c.after : c.before)++;
    }
    if (T > 30) continue;
    bool step_flipped = false;
    c.greedy_steps += GreedyAgainstReference(model, emu, prompt, 6, 1e-4, near_tie, &step_flipped);
  }
  return c;
}

// The same over the prompts of `oracle_dir`'s reference.json.
inline EmulationComparison CompareWithEmulation(Model& model, HybridReference& emu, HybridReference& exact,
                                                const std::string& oracle_dir) {
  std::vector<std::vector<int32_t>> prompts;
  for (const OracleCase& oc : ReadOracle(oracle_dir)) prompts.push_back(oc.prompt);
  return CompareWithEmulation(model, emu, &exact, prompts);
}

}  // namespace vtllm::model::testing
