#include "vt/cpu/reference.h"

#include <vector>

#include "vt/cpu/elem.h"
#include "vt/detail/numerics.h"

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

void RmsNorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps, const Tensor* residual,
             int64_t row0, int64_t row1) {
  const int64_t H = x.dim(-1);
  const DType xd = x.dtype(), od = out.dtype();
  std::vector<float> s(static_cast<size_t>(H));
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    for (int64_t i = 0; i < H; ++i) {
      float v = LoadFloat(x.data(), xd, base + i);
      if (residual) {
        v = RoundTo(xd, v + LoadFloat(residual->data(), xd, base + i));
        StoreFloat(residual->data(), xd, base + i, v);
      }
      s[i] = v;
    }
    const float ss = numerics::SumSquaresCanonical(H, [&](int64_t i) { return s[i]; });
    const float inv = numerics::RmsInverse(ss, H, eps);
    for (int64_t i = 0; i < H; ++i) {
      const float t = RoundTo(od, s[i] * inv);
      StoreFloat(out.data(), od, base + i, t * LoadFloat(weight.data(), weight.dtype(), i));
    }
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

void Cast(const Tensor& out, const Tensor& x, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) StoreFloat(out.data(), out.dtype(), i, LoadFloat(x.data(), x.dtype(), i));
}

}  // namespace vt::cpu::ref
