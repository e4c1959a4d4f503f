// A float64 reference forward of a Qwen3 or Qwen3-MoE checkpoint (q/k norms, no biases) whose
// linears can be emulated in FP8 from the formats' definitions, for the online-FP8 and
// `vtllm quantize` tests. Nothing here calls vt's quantizers or GEMMs:
//   - e4m3fn values come from enumerating the 127 non-negative finite codes, the nearest
//     picked, ties to the even code, saturating at 448;
//   - online FP8: one weight scale over the merged weight, s_w = f32(amax / 448), q =
//     e4m3(f32(w * f32(1 / s_w))); activations per token, s = max(f32(amax / 448),
//     1 / (448 * 512)), q = e4m3(f32(x / s)), out = s * s_w * Σ q_x q_w in float64;
//   - static FP8 (what vtllm's static path does with a checkpoint of per-shard scales, as
//     vLLM merges them): each shard q_i = e4m3(w * (1 / s_i)), requantized to max_i s_i
//     (e4m3(f32(decode(q_i) * s_i) * (1 / max s))) where s_i is not the max; the activation
//     q = e4m3(f32(x) * (1 / max input scale)); out = f32(s_in * s_w) * Σ q_x q_w.
// Activations are rounded to f32 where the FP8 formats read them (as vtllm's float32 run
// holds them); everything else is float64.
// Qwen3-MoE checkpoints (experts one tensor per expert): a sparse layer's router routes in
// float64 (softmax, the top k with ties to the lower index, renormalised if norm_topk_prob)
// and each routed expert is a SwiGLU whose three projections follow the mode:
//   - online FP8: one weight scale over the expert's gate and up rows together and one over
//     its down rows (as above); x per token (as above), and each (token, expert) row of
//     Silu(g) * u per row with the same rule;
//   - static FP8 (vLLM's fused MoE): one input scale per projection kind over the block's
//     experts (the max of gate's and up's, and of down's), each expert's gate/up requantized
//     to the larger of its two weight scales; x and Silu(g) * u quantized with x * (1 / s).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"

namespace vtllm::model::testing {

// The non-negative e4m3fn finite values by code (0x00..0x7E).
inline const std::array<double, 127>& E4m3Values() {
  static const std::array<double, 127> v = [] {
    std::array<double, 127> t{};
    for (int c = 0; c < 127; ++c) {
      const int e = c >> 3, m = c & 7;
      t[c] = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    }
    return t;
  }();
  return v;
}

// The e4m3fn code nearest to v (ties to the even code), saturating; v finite.
inline uint8_t E4m3Code(double v) {
  const auto& t = E4m3Values();
  const double a = std::fabs(v);
  int best = 0;
  for (int c = 1; c < 127; ++c) {
    const double d = std::fabs(t[c] - a), db = std::fabs(t[best] - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 0x80 : 0));
}
inline double E4m3Decode(uint8_t code) { return (code & 0x80 ? -1.0 : 1.0) * E4m3Values()[code & 0x7F]; }
inline double E4m3(double v) { return E4m3Decode(E4m3Code(v)); }

enum class RefMode { kBf16, kOnlineFp8, kStaticFp8 };

// y [T, N] = x [T, K] · wᵀ (w [N, K]) in float64.
inline std::vector<double> MatmulTRef(const std::vector<double>& x, const std::vector<double>& w, int64_t T,
                                      int64_t N, int64_t K) {
  std::vector<double> y(static_cast<size_t>(T * N), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += x[t * K + k] * w[n * K + k];
      y[t * N + n] = s;
    }
  return y;
}

// Row t of [T, V] logits: max |got - ref| over its V values; fp8_vs_exact grows to the
// largest |ref - exact| seen (how far the FP8 emulation is from the unquantized forward).
inline double RowDiff(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& exact,
                      int64_t t, int64_t V, double& fp8_vs_exact) {
  double d = 0;
  for (int64_t v = t * V; v < (t + 1) * V; ++v) {
    d = std::max(d, std::fabs(got[v] - ref[v]));
    fp8_vs_exact = std::max(fp8_vs_exact, std::fabs(ref[v] - exact[v]));
  }
  return d;
}

// NeoX RoPE in float64 of the first R dims of each head (x: [T, heads, D], position t at row
// t): pairs (i, i + R/2) rotated by t * theta^(-2i/R); R = D for full rotary.
inline void RopeNeox(std::vector<double>& x, int64_t T, int64_t heads, int64_t D, int64_t R, double theta) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < R / 2; ++i) {
        const double ang = t * std::pow(theta, -2.0 * i / R);
        double* e = &x[(t * heads + h) * D];
        const double a = e[i], b = e[i + R / 2];
        e[i] = a * std::cos(ang) - b * std::sin(ang);
        e[i + R / 2] = b * std::cos(ang) + a * std::sin(ang);
      }
}

class ReferenceForward {
 public:
  ReferenceForward(const std::string& dir, RefMode mode, std::map<std::string, float> weight_scale = {},
                   std::map<std::string, float> input_scale = {})
      : cfg_(ModelConfig::FromDir(dir)), ckpt_(Checkpoint::Open(dir)), mode_(mode),
        weight_scale_(std::move(weight_scale)), input_scale_(std::move(input_scale)) {}

  // max |x| of each linear's input (by shard) over every Logits call so far.
  const std::map<std::string, double>& input_amax() const { return amax_; }
  // max |key| (after the q/k norm and RoPE) and |value| of each attention layer
  // ("model.layers.N.self_attn.") over every Logits call so far.
  const std::map<std::string, std::pair<double, double>>& kv_amax() const { return kv_amax_; }

  // The weight as stored, widened (row-major [N, K]).
  std::vector<double> Weight(const std::string& name) const {
    const vt::Tensor t = ckpt_.Get(name);
    std::vector<double> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = t.dtype() == vt::DType::kF32 ? t.data_as<float>()[i] : vt::Bf16ToFloat(t.data_as<uint16_t>()[i]);
    return out;
  }

  // Logits [T, V] of every position of `ids` from position 0.
  std::vector<double> Logits(const std::vector<int32_t>& ids) {
    const int64_t T = static_cast<int64_t>(ids.size()), H = cfg_.hidden_size, D = cfg_.head_dim,
                  Hq = cfg_.num_attention_heads, Hk = cfg_.num_key_value_heads, I = cfg_.intermediate_size,
                  V = cfg_.vocab_size;
    const std::vector<double> embed = Weight("model.embed_tokens.weight");
    std::vector<double> x(static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(embed.begin() + ids[t] * H, H, x.begin() + t * H);
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      std::vector<double> n = RmsNorm(x, Weight(p + "input_layernorm.weight"), T, H);
      const std::string a = p + "self_attn.";
      const std::vector<double> qkv = Linear({a + "q_proj", a + "k_proj", a + "v_proj"}, n, T, H);
      const int64_t Nq = Hq * D, Nk = Hk * D, N = Nq + 2 * Nk;
      std::vector<double> q(T * Nq), k(T * Nk), v(T * Nk);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(qkv.begin() + t * N, Nq, q.begin() + t * Nq);
        std::copy_n(qkv.begin() + t * N + Nq, Nk, k.begin() + t * Nk);
        std::copy_n(qkv.begin() + t * N + Nq + Nk, Nk, v.begin() + t * Nk);
      }
      q = RmsNorm(q, Weight(a + "q_norm.weight"), T * Hq, D);
      k = RmsNorm(k, Weight(a + "k_norm.weight"), T * Hk, D);
      Rope(q, T, Hq, D);
      Rope(k, T, Hk, D);
      auto& [kmax, vmax] = kv_amax_[a];
      for (double e : k) kmax = std::max(kmax, std::fabs(e));
      for (double e : v) vmax = std::max(vmax, std::fabs(e));
      std::vector<double> att(T * Nq, 0.0);
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / (Hq / Hk);
        for (int64_t t = 0; t < T; ++t) {
          std::vector<double> s(t + 1);
          double mx = -INFINITY;
          for (int64_t u = 0; u <= t; ++u) {
            double d = 0;
            for (int64_t e = 0; e < D; ++e) d += q[t * Nq + h * D + e] * k[u * Nk + kh * D + e];
            s[u] = d / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[u]);
          }
          double sum = 0;
          for (double& z : s) sum += (z = std::exp(z - mx));
          for (int64_t u = 0; u <= t; ++u)
            for (int64_t e = 0; e < D; ++e) att[t * Nq + h * D + e] += s[u] / sum * v[u * Nk + kh * D + e];
        }
      }
      const std::vector<double> o = Linear({a + "o_proj"}, att, T, Nq);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      n = RmsNorm(x, Weight(p + "post_attention_layernorm.weight"), T, H);
      const std::string m = p + "mlp.";
      if (cfg_.IsSparseLayer(l)) {
        const std::vector<double> d = Moe(m, n, T);
        for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
        continue;
      }
      const std::vector<double> gu = Linear({m + "gate_proj", m + "up_proj"}, n, T, H);
      std::vector<double> act(T * I);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < I; ++i) {
          const double g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
          act[t * I + i] = g / (1.0 + std::exp(-g)) * u;
        }
      const std::vector<double> d = Linear({m + "down_proj"}, act, T, I);
      for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
    }
    const std::vector<double> f = RmsNorm(x, Weight("model.norm.weight"), T, H);
    const bool tied = cfg_.tie_word_embeddings || !ckpt_.Has("lm_head.weight");
    return MatmulT(f, tied ? embed : Weight("lm_head.weight"), T, V, H);  // lm_head stays BF16
  }

  // The sparse MoE MLP `m` ("model.layers.1.mlp.") of x [T, H] in the mode's math. Records
  // each expert projection's input amax over the tokens routed to it (input_amax(), by
  // "...experts.E.gate_proj" etc.; experts no token reached are absent).
  std::vector<double> Moe(const std::string& m, const std::vector<double>& x, int64_t T) {
    const int64_t H = cfg_.hidden_size, E = cfg_.num_experts, k = cfg_.num_experts_per_tok,
                  I = cfg_.moe_intermediate_size;
    const std::vector<double> router = Weight(m + "gate.weight");
    struct Expert {
      std::vector<double> gu, dn;  // [2I, H], [H, I] as multiplied (fp8 values in FP8 modes)
      float s13 = 1.0f, s2 = 1.0f;  // weight scales
    };
    std::vector<Expert> ex(static_cast<size_t>(E));
    float in13 = 0.0f, in2 = 0.0f;  // static: the block's input scales
    auto expert = [&](int64_t e, const char* proj) { return m + "experts." + std::to_string(e) + "." + proj; };
    for (int64_t e = 0; e < E; ++e) {
      Expert& w = ex[e];
      const std::string g = expert(e, "gate_proj"), u = expert(e, "up_proj"), d = expert(e, "down_proj");
      std::vector<double> wg = Weight(g + ".weight"), wu = Weight(u + ".weight");
      w.dn = Weight(d + ".weight");
      if (mode_ == RefMode::kOnlineFp8) {
        w.gu = wg;
        w.gu.insert(w.gu.end(), wu.begin(), wu.end());
        w.s13 = QuantizeOnline(w.gu);
        w.s2 = QuantizeOnline(w.dn);
      } else if (mode_ == RefMode::kStaticFp8) {
        const float sg = weight_scale_.at(g), su = weight_scale_.at(u), sd = weight_scale_.at(d);
        w.s13 = std::max(sg, su);
        for (auto [v, sw] : {std::pair{&wg, sg}, std::pair{&wu, su}}) {
          const float inv = 1.0f / sw, inv_max = 1.0f / w.s13;
          for (double& q : *v) {
            q = E4m3(static_cast<float>(q) * inv);
            if (sw != w.s13) q = E4m3(static_cast<float>(static_cast<float>(q) * sw) * inv_max);
          }
        }
        w.gu = wg;
        w.gu.insert(w.gu.end(), wu.begin(), wu.end());
        w.s2 = sd;
        const float inv2 = 1.0f / sd;
        for (double& q : w.dn) q = E4m3(static_cast<float>(q) * inv2);
        in13 = std::max({in13, input_scale_.at(g), input_scale_.at(u)});
        in2 = std::max(in2, input_scale_.at(d));
      } else {
        w.gu = wg;
        w.gu.insert(w.gu.end(), wu.begin(), wu.end());
      }
    }
    std::vector<double> out(static_cast<size_t>(T * H), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
      std::vector<double> p(static_cast<size_t>(E));
      double mx = -INFINITY, sum = 0;
      for (int64_t e = 0; e < E; ++e) {
        double l = 0;
        for (int64_t h = 0; h < H; ++h) l += xt[h] * router[e * H + h];
        mx = std::max(mx, p[e] = l);
      }
      for (double& v : p) sum += (v = std::exp(v - mx));
      for (double& v : p) v /= sum;
      std::vector<int64_t> order(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      double top = 0;
      for (int64_t j = 0; j < k; ++j) top += p[order[j]];
      double xmax = 0;
      for (double v : xt) xmax = std::max(xmax, std::fabs(v));
      // The x row as the experts multiply it, and its scale.
      std::vector<double> xq = xt;
      double sx = 1.0;
      if (mode_ == RefMode::kOnlineFp8) sx = QuantizeRow(xq);
      if (mode_ == RefMode::kStaticFp8)
        for (double& v : xq) v = E4m3(std::clamp(static_cast<float>(v) * (1.0f / in13), -448.0f, 448.0f));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = order[j];
        const Expert& w = ex[e];
        const double weight = cfg_.norm_topk_prob ? p[e] / top : p[e];
        for (const char* proj : {"gate_proj", "up_proj"}) {
          double& a = amax_[expert(e, proj)];
          a = std::max(a, xmax);
        }
        const double a13 = mode_ == RefMode::kOnlineFp8   ? sx * w.s13
                           : mode_ == RefMode::kStaticFp8 ? static_cast<double>(in13 * w.s13)
                                                          : 1.0;
        std::vector<double> act(static_cast<size_t>(I));
        double amax = 0;
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t h = 0; h < H; ++h) {
            g += xq[h] * w.gu[i * H + h];
            u += xq[h] * w.gu[(I + i) * H + h];
          }
          g *= a13;
          u *= a13;
          act[i] = g / (1.0 + std::exp(-g)) * u;
          amax = std::max(amax, std::fabs(act[i]));
        }
        double& da = amax_[expert(e, "down_proj")];
        da = std::max(da, amax);
        double a2 = 1.0;
        if (mode_ == RefMode::kOnlineFp8) a2 = QuantizeRow(act) * w.s2;
        if (mode_ == RefMode::kStaticFp8) {
          for (double& v : act) v = E4m3(std::clamp(static_cast<float>(v) * (1.0f / in2), -448.0f, 448.0f));
          a2 = static_cast<double>(in2 * w.s2);
        }
        for (int64_t h = 0; h < H; ++h) {
          double y = 0;
          for (int64_t i = 0; i < I; ++i) y += act[i] * w.dn[h * I + i];
          out[t * H + h] += weight * a2 * y;
        }
      }
    }
    return out;
  }

 private:
  // Online FP8 of a weight in place: s_w = f32(amax / 448) (1 for all zeros), each value
  // e4m3(f32(w * f32(1 / s_w))); returns s_w.
  static float QuantizeOnline(std::vector<double>& w) {
    double wmax = 0;
    for (double v : w) wmax = std::max(wmax, std::fabs(v));
    float sw = static_cast<float>(wmax) / 448.0f;
    if (!(sw > 0.0f)) sw = 1.0f;
    const float inv = 1.0f / sw;
    for (double& v : w) v = E4m3(static_cast<float>(v) * inv);
    return sw;
  }

  // One activation row per token, in place: s = max(f32(amax / 448), 1 / (448 * 512)) of the
  // row rounded to f32, each value e4m3(f32(x / s)); returns s.
  static double QuantizeRow(std::vector<double>& x) {
    float m = 0.0f;
    for (double v : x) m = std::max(m, std::fabs(static_cast<float>(v)));
    const float s = std::max(m / 448.0f, 1.0f / (448.0f * 512.0f));
    for (double& v : x) v = E4m3(static_cast<float>(v) / s);
    return s;
  }

  static std::vector<double> MatmulT(const std::vector<double>& x, const std::vector<double>& w, int64_t T,
                                     int64_t N, int64_t K) {
    return MatmulTRef(x, w, T, N, K);
  }

  std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
                              int64_t n) const {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
      const double inv = 1.0 / std::sqrt(ss / n + cfg_.rms_norm_eps);
      for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * inv * w[i];
    }
    return y;
  }

  // NeoX rotation of each head's halves at position t.
  void Rope(std::vector<double>& x, int64_t T, int64_t heads, int64_t D) const {
    RopeNeox(x, T, heads, D, D, cfg_.rope_theta);
  }

  // y [T, sum N_i] of the shards (stacked rows) applied to x [T, K].
  std::vector<double> Linear(const std::vector<std::string>& shards, const std::vector<double>& x, int64_t T,
                             int64_t K) {
    double amax = 0;
    for (double v : x) amax = std::max(amax, std::fabs(v));
    for (const std::string& s : shards) amax_[s] = std::max(amax_[s], amax);
    std::vector<std::vector<double>> parts;
    for (const std::string& s : shards) parts.push_back(Weight(s + ".weight"));
    std::vector<double> w;
    for (const auto& p : parts) w.insert(w.end(), p.begin(), p.end());
    const int64_t N = static_cast<int64_t>(w.size()) / K;
    if (mode_ == RefMode::kBf16) return MatmulT(x, w, T, N, K);

    std::vector<double> xq(x.size()), scale_row(T);
    double alpha = 1.0;
    if (mode_ == RefMode::kOnlineFp8) {
      alpha = QuantizeOnline(w);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> row(x.begin() + t * K, x.begin() + (t + 1) * K);
        scale_row[t] = QuantizeRow(row);
        std::copy(row.begin(), row.end(), xq.begin() + t * K);
      }
    } else {
      float max_ws = 0.0f, in_s = 0.0f;
      for (const std::string& s : shards) {
        max_ws = std::max(max_ws, weight_scale_.at(s));
        in_s = std::max(in_s, input_scale_.at(s));
      }
      size_t off = 0;
      for (size_t i = 0; i < shards.size(); ++i) {
        const float ws = weight_scale_.at(shards[i]), inv = 1.0f / ws, inv_max = 1.0f / max_ws;
        for (size_t j = 0; j < parts[i].size(); ++j) {
          double q = E4m3(static_cast<float>(parts[i][j]) * inv);
          if (ws != max_ws) q = E4m3(static_cast<float>(static_cast<float>(q) * ws) * inv_max);
          w[off + j] = q;
        }
        off += parts[i].size();
      }
      const float inv_in = 1.0f / in_s;
      for (size_t i = 0; i < x.size(); ++i) {
        const float v = std::clamp(static_cast<float>(x[i]) * inv_in, -448.0f, 448.0f);
        xq[i] = E4m3(v);
      }
      alpha = in_s * max_ws;  // f32 product, as the caller folds it
      std::fill(scale_row.begin(), scale_row.end(), 1.0);
    }
    std::vector<double> y = MatmulT(xq, w, T, N, K);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) y[t * N + n] *= scale_row[t] * alpha;
    return y;
  }

  ModelConfig cfg_;
  Checkpoint ckpt_;
  RefMode mode_;
  std::map<std::string, float> weight_scale_, input_scale_;
  std::map<std::string, double> amax_;
  std::map<std::string, std::pair<double, double>> kv_amax_;
};

}  // namespace vtllm::model::testing
