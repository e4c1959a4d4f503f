#include "vt/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "vt/cpu/elem.h"
#include "vt/detail/numerics.h"
#include "vt/error.h"
#include "vt/ops/matmul.h"
#include "vt/ops/quant.h"

namespace vt::cpu::ref {

void QuantFp8Static(const Tensor& out, const Tensor& x, float input_scale, int64_t begin, int64_t end) {
  const float inv = 1.0f / input_scale;
  auto* o = out.data_as<uint8_t>();
  for (int64_t i = begin; i < end; ++i) o[i] = numerics::QuantizeFp8(LoadFloat(x.data(), x.dtype(), i), inv);
}

void MatmulFp8(const Tensor& out, const Tensor& a, const Tensor& b, float alpha, const Tensor* bias, int64_t m0,
               int64_t m1) {
  const int64_t N = b.dim(0), K = b.dim(1);
  const auto* pa = a.data_as<uint8_t>();
  const auto* pb = b.data_as<uint8_t>();
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += Fp8E4M3ToFloat(pa[m * K + k]) * Fp8E4M3ToFloat(pb[n * K + k]);
      float v = alpha * acc;
      if (bias) v += LoadFloat(bias->data(), bias->dtype(), n);
      StoreFloat(out.data(), out.dtype(), m * N + n, v);
    }
  }
}

void QuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t group_size,
                           float amax_floor, float scale_floor, int64_t m0, int64_t m1) {
  const int64_t K = x.dim(1), G = scales.dim(1);
  auto* o = out.data_as<uint8_t>();
  auto* ps = scales.data_as<float>();
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * group_size, k1 = std::min(K, k0 + group_size);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = std::fabs(LoadFloat(x.data(), x.dtype(), m * K + k));
        if (v > amax) amax = v;  // NaN fails the comparison: left out
      }
      const float s = Fp8GroupScale(amax, amax_floor, scale_floor);
      ps[m * G + g] = s;
      for (int64_t k = k0; k < k1; ++k) o[m * K + k] = Fp8QuantizeDiv(LoadFloat(x.data(), x.dtype(), m * K + k), s);
    }
  }
}

void MatmulFp8GroupScaled(const Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                          const Tensor& b_scales, int64_t block_n, int64_t block_k, const Tensor* bias, int64_t m0,
                          int64_t m1) {
  const int64_t N = b.dim(0), K = b.dim(1), G = a_scales.dim(1);
  const auto* pa = a.data_as<uint8_t>();
  const auto* pb = b.data_as<uint8_t>();
  const auto* sa = a_scales.data_as<float>();
  const auto* sb = b_scales.data_as<float>();
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        const int64_t k0 = g * block_k, k1 = std::min(K, k0 + block_k);
        float t = 0.0f;
        for (int64_t k = k0; k < k1; ++k) t += Fp8E4M3ToFloat(pa[m * K + k]) * Fp8E4M3ToFloat(pb[n * K + k]);
        acc += t * sa[m * G + g] * sb[(n / block_n) * G + g];
      }
      if (bias) acc += LoadFloat(bias->data(), bias->dtype(), n);
      StoreFloat(out.data(), out.dtype(), m * N + n, acc);
    }
  }
}

void Matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias, int64_t m0, int64_t m1) {
  const int64_t N = b.dim(0), K = b.dim(1);
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc += LoadFloat(a.data(), a.dtype(), m * K + k) * LoadFloat(b.data(), b.dtype(), n * K + k);
      if (bias) acc += LoadFloat(bias->data(), bias->dtype(), n);
      StoreFloat(out.data(), out.dtype(), m * N + n, acc);
    }
  }
}

namespace {
// Row r of an RMSNorm: s = x (+ residual, rounded to x's dtype and stored back into it);
// returns 1 / rms(s) as every RMSNorm kernel computes it.
float RmsRowInverse(const Tensor& x, const Tensor* residual, float eps, int64_t r, std::vector<float>& s) {
  const int64_t H = x.dim(-1), base = r * H;
  const DType xd = x.dtype();
  for (int64_t i = 0; i < H; ++i) {
    float v = LoadFloat(x.data(), xd, base + i);
    if (residual) {
      v = RoundTo(xd, v + LoadFloat(residual->data(), xd, base + i));
      StoreFloat(residual->data(), xd, base + i, v);
    }
    s[i] = v;
  }
  const float ss = numerics::SumSquaresCanonical(H, [&](int64_t i) { return s[i]; });
  return numerics::RmsInverse(ss, H, eps);
}
}  // namespace

void RmsNorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps, const Tensor* residual,
             int64_t row0, int64_t row1) {
  const int64_t H = x.dim(-1);
  const DType od = out.dtype();
  std::vector<float> s(static_cast<size_t>(H));
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    const float inv = RmsRowInverse(x, residual, eps, r, s);
    for (int64_t i = 0; i < H; ++i) {
      const float t = RoundTo(od, s[i] * inv);
      StoreFloat(out.data(), od, base + i, t * LoadFloat(weight.data(), weight.dtype(), i));
    }
  }
}

void RmsNormZeroCentred(const Tensor& out, const Tensor& x, const Tensor& weight, float eps, const Tensor* residual,
                        int64_t row0, int64_t row1) {
  const int64_t H = x.dim(-1);
  const DType od = out.dtype();
  std::vector<float> s(static_cast<size_t>(H));
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    const float inv = RmsRowInverse(x, residual, eps, r, s);
    for (int64_t i = 0; i < H; ++i)
      StoreFloat(out.data(), od, base + i, (s[i] * inv) * (1.0f + LoadFloat(weight.data(), weight.dtype(), i)));
  }
}

void RmsNormGated(const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps,
                  int64_t row0, int64_t row1) {
  const int64_t H = x.dim(-1);
  const DType xd = x.dtype(), od = out.dtype();
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    const float ss = numerics::SumSquaresCanonical(H, [&](int64_t i) { return LoadFloat(x.data(), xd, base + i); });
    const float inv = numerics::RmsInverse(ss, H, eps);
    for (int64_t i = 0; i < H; ++i) {
      const float t = RoundTo(od, LoadFloat(x.data(), xd, base + i) * inv);
      const float u = RoundTo(od, t * LoadFloat(weight.data(), weight.dtype(), i));
      const float g = numerics::Silu(LoadFloat(gate.data(), gate.dtype(), base + i));
      StoreFloat(out.data(), od, base + i, u * g);
    }
  }
}

void SiluMul(const Tensor& out, const Tensor& x, int64_t row0, int64_t row1) {
  const int64_t I = out.dim(-1);
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t i = 0; i < I; ++i) {
      const float g = LoadFloat(x.data(), x.dtype(), r * 2 * I + i);
      const float u = LoadFloat(x.data(), x.dtype(), r * 2 * I + I + i);
      StoreFloat(out.data(), out.dtype(), r * I + i, numerics::Silu(g) * u);
    }
  }
}

namespace {
// Rows [m0, m1) of a per-token-group recipe: produce(dst, m0, m1) writes the BF16 rows
// (rows 0.. of dst, which is normed_out's rows when given), then they are quantized.
template <typename Produce>
void PerTokenGroupRows(const Tensor& out, const Tensor& scales, int64_t width, int64_t group_size, float amax_floor,
                       float scale_floor, const Tensor* normed_out, int64_t m0, int64_t m1, Produce produce) {
  if (m1 <= m0) return;
  const Tensor dst =
      normed_out != nullptr ? normed_out->Slice(0, m0, m1) : Tensor::Empty({m1 - m0, width}, DType::kBF16, Device::Cpu());
  produce(dst);
  QuantFp8PerTokenGroup(out.Slice(0, m0, m1), scales.Slice(0, m0, m1), dst, group_size, amax_floor, scale_floor, 0,
                        m1 - m0);
}
}  // namespace

void RmsNormQuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, const Tensor& weight,
                                  float eps, int64_t group_size, float amax_floor, float scale_floor,
                                  const Tensor* residual, const Tensor* normed_out, int64_t m0, int64_t m1,
                                  bool zero_centred) {
  PerTokenGroupRows(out, scales, x.dim(1), group_size, amax_floor, scale_floor, normed_out, m0, m1,
                    [&](const Tensor& dst) {
                      const Tensor rr = residual != nullptr ? residual->Slice(0, m0, m1) : Tensor();
                      const Tensor* r = residual != nullptr ? &rr : nullptr;
                      if (zero_centred)
                        RmsNormZeroCentred(dst, x.Slice(0, m0, m1), weight, eps, r, 0, m1 - m0);
                      else
                        RmsNorm(dst, x.Slice(0, m0, m1), weight, eps, r, 0, m1 - m0);
                    });
}

void RmsNormGatedQuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, const Tensor& gate,
                                       const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                       float scale_floor, int64_t m0, int64_t m1) {
  PerTokenGroupRows(out, scales, x.dim(1), group_size, amax_floor, scale_floor, nullptr, m0, m1,
                    [&](const Tensor& dst) {
                      RmsNormGated(dst, x.Slice(0, m0, m1), gate.Slice(0, m0, m1), weight, eps, 0, m1 - m0);
                    });
}

void SiluMulQuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t group_size,
                                  float amax_floor, float scale_floor, int64_t m0, int64_t m1) {
  PerTokenGroupRows(out, scales, out.dim(1), group_size, amax_floor, scale_floor, nullptr, m0, m1,
                    [&](const Tensor& dst) { SiluMul(dst, x.Slice(0, m0, m1), 0, m1 - m0); });
}

void SigmoidGatedAdd(const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base, int64_t row0,
                     int64_t row1) {
  const int64_t C = x.dim(1), G = gate.dim(1);
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const float g = LoadFloat(gate.data(), gate.dtype(), r * G + (G == 1 ? 0 : c));
      const float s = 1.0f / (1.0f + numerics::Exp(-g));
      const float b = base != nullptr ? LoadFloat(base->data(), base->dtype(), r * C + c) : 0.0f;
      StoreFloat(out.data(), out.dtype(), r * C + c, b + s * LoadFloat(x.data(), x.dtype(), r * C + c));
    }
  }
}

void Cast(const Tensor& out, const Tensor& x, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) StoreFloat(out.data(), out.dtype(), i, LoadFloat(x.data(), x.dtype(), i));
}

namespace {

// Rotates the heads of one token row x[0 .. heads*D) with cos c[0..D/2) and sin s[0..D/2).
template <typename T, typename Load, typename Store>
void RotateRow(T* x, int64_t heads, int64_t D, const float* c, const float* s, Load load, Store store) {
  const int64_t half = D / 2;
  for (int64_t h = 0; h < heads; ++h) {
    T* p = x + h * D;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = load(p[i]), x2 = load(p[half + i]);
      p[i] = store(x1 * c[i] - x2 * s[i]);
      p[half + i] = store(x2 * c[i] + x1 * s[i]);
    }
  }
}

}  // namespace

void RotaryEmbeddingRow(const Tensor& x, int64_t t, int64_t head_size, const float* c, const float* s) {
  const int64_t D = head_size, width = x.dim(1), heads = width / D;
  switch (x.dtype()) {
    case DType::kF32:
      RotateRow(x.data_as<float>() + t * width, heads, D, c, s, [](float v) { return v; },
                [](float v) { return v; });
      break;
    case DType::kBF16:
      RotateRow(x.data_as<uint16_t>() + t * width, heads, D, c, s, [](uint16_t v) { return Bf16ToFloat(v); },
                [](float v) { return FloatToBf16(v); });
      break;
    case DType::kF16:
      RotateRow(x.data_as<uint16_t>() + t * width, heads, D, c, s, [](uint16_t v) { return F16ToFloat(v); },
                [](float v) { return FloatToF16(v); });
      break;
    default: throw Error(StrCat("internal: RotaryEmbedding of ", DTypeName(x.dtype())));
  }
}

}  // namespace vt::cpu::ref

namespace vt::cpu::ref {

void MoeTopKRouting(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool renormalize, int64_t t0,
                    int64_t t1) {
  const int64_t E = logits.dim(1), k = ids.dim(1);
  const float* l = logits.data_as<float>();
  int32_t* out_ids = ids.data_as<int32_t>();
  float* out_w = weights.data_as<float>();
  std::vector<float> p(static_cast<size_t>(E));
  std::vector<char> taken(static_cast<size_t>(E));
  for (int64_t t = t0; t < t1; ++t) {
    const float* row = l + t * E;
    float m = row[0];
    for (int64_t i = 1; i < E; ++i) m = row[i] > m ? row[i] : m;  // a NaN reaches every p through s
    float s = 0.0f;
    for (int64_t i = 0; i < E; ++i) {
      p[i] = numerics::Exp(row[i] - m);
      s += p[i];
    }
    for (int64_t i = 0; i < E; ++i) p[i] = p[i] / s;
    std::fill(taken.begin(), taken.end(), 0);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t i = 0; i < E; ++i)  // strictly larger: an equal value keeps the lower index
        if (!taken[i] && (best < 0 || p[i] > p[best])) best = i;
      taken[best] = 1;
      out_ids[t * k + j] = static_cast<int32_t>(best);
      out_w[t * k + j] = p[best];
      sum += p[best];
    }
    if (renormalize)
      for (int64_t j = 0; j < k; ++j) out_w[t * k + j] = out_w[t * k + j] / sum;
  }
}

namespace {

int64_t ExpertOf(const Tensor& ids, int64_t i, int64_t E, const char* op) {
  const int32_t e = ids.data_as<int32_t>()[i];
  VT_CHECK(e >= 0 && e < E, op, ": expert id ", e, " (ids element ", i, ") is outside [0, ", E, ")");
  return e;
}

// The dense definition of the expert ops for one token: `gate_up(e, n)` is the rounded
// gate/up output n of expert e, `act(a)` turns the row a = Silu(g) * u (f32) into the down
// projection's input in place, `down(e, a, h)` is output h of its down projection of `a`.
template <typename GateUp, typename Act, typename Down>
void ExpertsOfToken(const Tensor& out, const Tensor& ids, const Tensor& weights, int64_t t, int64_t E, int64_t I,
                    const char* op, GateUp gate_up, Act act, Down down) {
  const int64_t H = out.dim(1), k = ids.dim(1);
  std::vector<float> gu(static_cast<size_t>(2 * I)), a(static_cast<size_t>(I)), acc(static_cast<size_t>(H), 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t e = ExpertOf(ids, t * k + j, E, op);
    const float w = weights.data_as<float>()[t * k + j];
    for (int64_t n = 0; n < 2 * I; ++n) gu[n] = gate_up(e, n);
    for (int64_t i = 0; i < I; ++i) a[i] = numerics::Silu(gu[i]) * gu[I + i];
    act(a);
    for (int64_t h = 0; h < H; ++h) acc[h] += w * down(e, a, h);
  }
  for (int64_t h = 0; h < H; ++h) StoreFloat(out.data(), out.dtype(), t * H + h, acc[h]);
}

}  // namespace

void MoeExperts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                const Tensor& w_gate_up, const Tensor& w_down, int64_t t0, int64_t t1) {
  const int64_t H = x.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  const DType act = x.dtype(), wd = w_gate_up.dtype();
  for (int64_t t = t0; t < t1; ++t) {
    ExpertsOfToken(
        out, ids, weights, t, E, I, "MoeExperts",
        [&](int64_t e, int64_t n) {
          float s = 0.0f;
          for (int64_t c = 0; c < H; ++c)
            s += LoadFloat(x.data(), act, t * H + c) * LoadFloat(w_gate_up.data(), wd, (e * 2 * I + n) * H + c);
          return RoundTo(act, s);
        },
        [&](std::vector<float>& a) {
          for (float& v : a) v = RoundTo(act, v);
        },
        [&](int64_t e, const std::vector<float>& a, int64_t h) {
          float s = 0.0f;
          for (int64_t i = 0; i < I; ++i) s += a[i] * LoadFloat(w_down.data(), wd, (e * H + h) * I + i);
          return s;
        });
  }
}

void MoeExpertsFp8(const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                   const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                   float down_input_scale, const Tensor& alpha_down, int64_t t0, int64_t t1) {
  const int64_t H = x8.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  const DType act = out.dtype();
  const auto* px = x8.data_as<uint8_t>();
  const auto* p13 = w_gate_up.data_as<uint8_t>();
  const auto* p2 = w_down.data_as<uint8_t>();
  const float* al13 = alpha_gate_up.data_as<float>();
  const float* al2 = alpha_down.data_as<float>();
  const float inv = 1.0f / down_input_scale;
  for (int64_t t = t0; t < t1; ++t) {
    ExpertsOfToken(
        out, ids, weights, t, E, I, "MoeExpertsFp8",
        [&](int64_t e, int64_t n) {
          float s = 0.0f;
          for (int64_t c = 0; c < H; ++c)
            s += Fp8E4M3ToFloat(px[t * H + c]) * Fp8E4M3ToFloat(p13[(e * 2 * I + n) * H + c]);
          return RoundTo(act, al13[e] * s);
        },
        [&](std::vector<float>& a) {
          for (float& v : a) v = Fp8E4M3ToFloat(numerics::QuantizeFp8(RoundTo(act, v), inv));
        },
        [&](int64_t e, const std::vector<float>& a, int64_t h) {
          float s = 0.0f;
          for (int64_t i = 0; i < I; ++i) s += a[i] * Fp8E4M3ToFloat(p2[(e * H + h) * I + i]);
          return al2[e] * s;
        });
  }
}

void MoeExpertsFp8PerToken(const Tensor& out, const Tensor& x8, const Tensor& x_scales, const Tensor& ids,
                           const Tensor& weights, const Tensor& w_gate_up, const Tensor& w_scale_gate_up,
                           const Tensor& w_down, const Tensor& w_scale_down, int64_t t0, int64_t t1) {
  const int64_t H = x8.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  const DType act = out.dtype();
  const auto* px = x8.data_as<uint8_t>();
  const auto* p13 = w_gate_up.data_as<uint8_t>();
  const auto* p2 = w_down.data_as<uint8_t>();
  const float* ws13 = w_scale_gate_up.data_as<float>();
  const float* ws2 = w_scale_down.data_as<float>();
  for (int64_t t = t0; t < t1; ++t) {
    const float sx = x_scales.data_as<float>()[t];
    float sa = 0.0f;  // the scale of the (token, slot) row `act` quantized last
    ExpertsOfToken(
        out, ids, weights, t, E, I, "MoeExpertsFp8PerToken",
        [&](int64_t e, int64_t n) {
          float s = 0.0f;
          for (int64_t c = 0; c < H; ++c)
            s += Fp8E4M3ToFloat(px[t * H + c]) * Fp8E4M3ToFloat(p13[(e * 2 * I + n) * H + c]);
          return RoundTo(act, s * sx * ws13[e]);
        },
        [&](std::vector<float>& a) {
          float amax = 0.0f;
          for (float& v : a) {
            v = RoundTo(act, v);
            if (std::fabs(v) > amax) amax = std::fabs(v);  // NaN fails the comparison: left out
          }
          sa = Fp8GroupScale(amax, 0.0f, kFp8PerTokenScaleFloor);
          for (float& v : a) v = Fp8E4M3ToFloat(Fp8QuantizeDiv(v, sa));
        },
        [&](int64_t e, const std::vector<float>& a, int64_t h) {
          float s = 0.0f;
          for (int64_t i = 0; i < I; ++i) s += a[i] * Fp8E4M3ToFloat(p2[(e * H + h) * I + i]);
          return s * sa * ws2[e];
        });
  }
}

void MoeExpertsFp8GroupScaled(const Tensor& out, const Tensor& x8, const Tensor& x_scales, const Tensor& ids,
                              const Tensor& weights, const Tensor& w_gate_up, const Tensor& s_gate_up,
                              const Tensor& w_down, const Tensor& s_down, int64_t block_n, int64_t block_k,
                              float amax_floor, float scale_floor, int64_t t0, int64_t t1) {
  const int64_t H = x8.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  const int64_t nI = (I + block_n - 1) / block_n, nH = (H + block_n - 1) / block_n;
  const int64_t GH = (H + block_k - 1) / block_k, GI = (I + block_k - 1) / block_k;
  const DType act = out.dtype();
  const auto* px = x8.data_as<uint8_t>();
  const auto* p13 = w_gate_up.data_as<uint8_t>();
  const auto* p2 = w_down.data_as<uint8_t>();
  const float* sx = x_scales.data_as<float>();
  const float* s13 = s_gate_up.data_as<float>();
  const float* s2 = s_down.data_as<float>();
  // Σ_g (Σ_{c in g} a[c]·w[c]) · sa[g] · sw[g], groups of block_k of K columns.
  auto product = [&](auto a_at, const uint8_t* w, int64_t K, const float* sa, const float* sw, int64_t G) {
    float acc = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.0f;
      for (int64_t c = g * block_k; c < std::min(K, (g + 1) * block_k); ++c) s += a_at(c) * Fp8E4M3ToFloat(w[c]);
      acc += s * sa[g] * sw[g];
    }
    return acc;
  };
  std::vector<float> sa(static_cast<size_t>(GI));  // the scales of the (token, slot) row `act` quantized last
  for (int64_t t = t0; t < t1; ++t) {
    ExpertsOfToken(
        out, ids, weights, t, E, I, "MoeExpertsFp8GroupScaled",
        [&](int64_t e, int64_t n) {
          // gate row n < I reads scale row n / bn of the expert's gate rows; up row I + i reads nI + i / bn
          const int64_t srow = e * 2 * nI + (n < I ? n / block_n : nI + (n - I) / block_n);
          return RoundTo(act, product([&](int64_t c) { return Fp8E4M3ToFloat(px[t * H + c]); },
                                      p13 + (e * 2 * I + n) * H, H, sx + t * GH, s13 + srow * GH, GH));
        },
        [&](std::vector<float>& a) {
          for (float& v : a) v = RoundTo(act, v);
          for (int64_t g = 0; g < GI; ++g) {
            const int64_t c0 = g * block_k, c1 = std::min(I, c0 + block_k);
            float amax = 0.0f;
            for (int64_t c = c0; c < c1; ++c)
              if (std::fabs(a[c]) > amax) amax = std::fabs(a[c]);  // NaN fails the comparison: left out
            sa[g] = Fp8GroupScale(amax, amax_floor, scale_floor);
            for (int64_t c = c0; c < c1; ++c) a[c] = Fp8E4M3ToFloat(Fp8QuantizeDiv(a[c], sa[g]));
          }
        },
        [&](int64_t e, const std::vector<float>& a, int64_t h) {
          return product([&](int64_t c) { return a[c]; }, p2 + (e * H + h) * I, I, sa.data(),
                         s2 + (e * nH + h / block_n) * GI, GI);
        });
  }
}

}  // namespace vt::cpu::ref
