// The elementwise kernels written once against the vector primitives of simd_vec.h;
// elementwise_avx512.cpp and elementwise_avx2.cpp compile them at their width.
//
// Each follows its scalar reference (reference.cpp) operation by operation: the same
// roundings in the same places, the canonical 32-lane sum of squares, and the fused
// recipes' BF16 intermediate, so the bytes equal the reference's and the composite's.
#pragma once

#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/simd_vec.h"

namespace vt::cpu::VT_SIMD_NS {
namespace {

using elementwise::RowArgs;

inline int TailLanes(int64_t remaining) { return remaining < kLanes ? static_cast<int>(remaining) : kLanes; }

// ---- QuantFp8Static ----------------------------------------------------------------------

template <DType D>
inline V LoadAs(const void* base, int64_t i) {
  if constexpr (D == DType::kF32) return LoadF32(static_cast<const float*>(base) + i);
  if constexpr (D == DType::kBF16) return Bf16BitsToFloat(LoadU16(static_cast<const uint16_t*>(base) + i));
  if constexpr (D == DType::kF16) return HalfToFloat(static_cast<const uint16_t*>(base) + i);
}

template <DType D>
void QuantLoop(const void* x, uint8_t* out, int64_t begin, int64_t end, const Fp8Scale& s) {
  int64_t i = begin;
  for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
    const VI q0 = QuantizeFp8(LoadAs<D>(x, i), s);
    const VI q1 = QuantizeFp8(LoadAs<D>(x, i + kLanes), s);
    const VI q2 = QuantizeFp8(LoadAs<D>(x, i + 2 * kLanes), s);
    const VI q3 = QuantizeFp8(LoadAs<D>(x, i + 3 * kLanes), s);
    StoreU8(out + i, q0);
    StoreU8(out + i + kLanes, q1);
    StoreU8(out + i + 2 * kLanes, q2);
    StoreU8(out + i + 3 * kLanes, q3);
  }
  for (; i < end; i += kLanes) {
    const int n = TailLanes(end - i);
    StoreFp8N(out, i, QuantizeFp8(LoadN(x, D, i, n), s), n);
  }
}

void QuantFp8(const void* x, DType xd, uint8_t* out, int64_t begin, int64_t end, float input_scale) {
  const Fp8Scale s(input_scale);
  switch (xd) {
    case DType::kF32: return QuantLoop<DType::kF32>(x, out, begin, end, s);
    case DType::kBF16: return QuantLoop<DType::kBF16>(x, out, begin, end, s);
    default: return QuantLoop<DType::kF16>(x, out, begin, end, s);
  }
}

// ---- Cast --------------------------------------------------------------------------------

void Cast(const void* x, DType xd, void* out, DType od, int64_t begin, int64_t end) {
  if (xd == DType::kF8E4M3) {
    for (int64_t i = begin; i < end; i += kLanes) {
      const int n = TailLanes(end - i);
      StoreN(out, od, i, LoadFp8N(static_cast<const uint8_t*>(x), i, n), n);
    }
    return;
  }
  for (int64_t i = begin; i < end; i += kLanes) {
    const int n = TailLanes(end - i);
    StoreN(out, od, i, LoadN(x, xd, i, n), n);
  }
}

// ---- norms and activations ---------------------------------------------------------------

// The last step of every row kernel: the op's rounding and store, or, for a fused recipe,
// the BF16 intermediate (optionally stored) quantized to fp8.
inline void Emit(const RowArgs& a, const Fp8Scale& s, int64_t i, V y, int n) {
  if (a.fp8_out == nullptr) return StoreN(a.out, a.out_dtype, i, y, n);
  y = Bf16Round(y);
  if (a.out != nullptr) StoreN(a.out, DType::kBF16, i, y, n);
  StoreFp8N(a.fp8_out, i, QuantizeFp8(y, s), n);
}

// The dtype the row is rounded to between steps.
inline DType StepDType(const RowArgs& a) { return a.fp8_out != nullptr ? DType::kBF16 : a.out_dtype; }

// numerics::RmsInverse.
inline float RmsInverse(float sum_sq, int64_t n, float eps) {
  return 1.0f / __builtin_sqrtf(sum_sq / static_cast<float>(n) + eps);
}

// Accumulates v * v into the canonical lane of element c (a multiple of kLanes).
inline void AccumulateSquares(V (&acc)[kAccs], int64_t c, V v) {
  const int k = static_cast<int>((c & 31) / kLanes);
  acc[k] = Fma(v, v, acc[k]);
}

void RmsNormRows(const RowArgs& a, int64_t row0, int64_t row1) {
  const int64_t H = a.width;
  const DType xd = a.x_dtype, td = StepDType(a);
  const Fp8Scale s(a.input_scale);
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    V acc[kAccs];
    for (V& v : acc) v = Zero();
    for (int64_t c = 0; c < H; c += kLanes) {
      const int n = TailLanes(H - c);
      V v = LoadN(a.x, xd, base + c, n);
      if (a.residual != nullptr) {
        v = RoundTo(xd, Add(v, LoadN(a.residual, xd, base + c, n)));
        StoreN(a.residual, xd, base + c, v, n);
      }
      AccumulateSquares(acc, c, v);
    }
    const V inv = Set1(RmsInverse(CombineLanes(acc), H, a.eps));
    // With a residual the normalised value is the sum just written back (exact in xd).
    const void* src = a.residual != nullptr ? a.residual : a.x;
    for (int64_t c = 0; c < H; c += kLanes) {
      const int n = TailLanes(H - c);
      const V t = RoundTo(td, Mul(LoadN(src, xd, base + c, n), inv));
      Emit(a, s, base + c, Mul(t, LoadN(a.weight, a.weight_dtype, c, n)), n);
    }
  }
}

void RmsNormGatedRows(const RowArgs& a, int64_t row0, int64_t row1) {
  const int64_t H = a.width;
  const DType xd = a.x_dtype, td = StepDType(a);
  const Fp8Scale s(a.input_scale);
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    V acc[kAccs];
    for (V& v : acc) v = Zero();
    for (int64_t c = 0; c < H; c += kLanes) AccumulateSquares(acc, c, LoadN(a.x, xd, base + c, TailLanes(H - c)));
    const V inv = Set1(RmsInverse(CombineLanes(acc), H, a.eps));
    for (int64_t c = 0; c < H; c += kLanes) {
      const int n = TailLanes(H - c);
      const V t = RoundTo(td, Mul(LoadN(a.x, xd, base + c, n), inv));
      const V u = RoundTo(td, Mul(t, LoadN(a.weight, a.weight_dtype, c, n)));
      const V g = Silu(LoadN(a.gate, a.gate_dtype, base + c, n));
      Emit(a, s, base + c, Mul(u, g), n);
    }
  }
}

void SiluMulRows(const RowArgs& a, int64_t row0, int64_t row1) {
  const int64_t I = a.width;
  const Fp8Scale s(a.input_scale);
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t c = 0; c < I; c += kLanes) {
      const int n = TailLanes(I - c);
      const V g = LoadN(a.x, a.x_dtype, r * 2 * I + c, n);
      const V u = LoadN(a.x, a.x_dtype, r * 2 * I + I + c, n);
      Emit(a, s, r * I + c, Mul(Silu(g), u), n);
    }
  }
}

}  // namespace
}  // namespace vt::cpu::VT_SIMD_NS
