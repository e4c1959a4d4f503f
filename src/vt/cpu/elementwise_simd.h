// The elementwise kernels written once against the vector primitives of simd_vec.h;
// elementwise_avx512.cpp, elementwise_avx2.cpp and elementwise_neon.cpp compile them at their
// width.
//
// Each follows its scalar reference (reference.cpp) operation by operation: the same
// roundings in the same places, the canonical 32-lane sum of squares, and the fused
// recipes' BF16 intermediate, so the bytes equal the reference's and the composite's.
#pragma once

#include <type_traits>
#include <vector>

#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/simd_vec.h"

namespace vt::cpu::VT_SIMD_NS {
namespace {

using elementwise::RowArgs;

VT_INLINE int TailLanes(int64_t remaining) { return remaining < kLanes ? static_cast<int>(remaining) : kLanes; }

// ---- QuantFp8Static ----------------------------------------------------------------------

template <DType D>
VT_INLINE V LoadAs(const void* base, int64_t i) {
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

// ---- QuantFp8PerTokenGroup ----------------------------------------------------------------
//
// Per group: amax over the non-NaN magnitudes (Max(v, m) keeps m where v is NaN, on every
// ISA; the max is exact in any order), s as Fp8GroupScale forms it (vt/ops/quant.h, written
// out here: no inline function is shared with the portable code), then each element as
// Fp8QuantizeDiv: x / s, clamped to ±448 (NaN passes the clamp and stays NaN with its sign),
// e4m3fn RNE. A group whose s is +Inf (it holds an infinity) is done element by element:
// there x / s is ±0, except ±Inf (saturate, ±448) and NaN (kept).
template <DType D>
void QuantGroupsOf(const void* x, uint8_t* out, float* scales, int64_t K, int64_t G, int64_t group_size,
                   float amax_floor, float scale_floor, int64_t row0, int64_t row1) {
  const VI abs_mask = Set1I(0x7FFFFFFF);
  for (int64_t m = row0; m < row1; ++m)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t end = (g + 1) * group_size < K ? (g + 1) * group_size : K;
      const int64_t k0 = m * K + g * group_size, n = end - g * group_size;
      V mx = Zero();
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes) mx = Max(AsF(AndI(AsI(LoadAs<D>(x, k0 + i)), abs_mask)), mx);
      if (i < n) mx = Max(AsF(AndI(AsI(LoadN(x, D, k0 + i, TailLanes(n - i))), abs_mask)), mx);
      alignas(64) float lanes[kLanes];
      StoreF32(lanes, mx);
      float amax = 0.0f;
      for (int l = 0; l < kLanes; ++l) amax = lanes[l] > amax ? lanes[l] : amax;
      const float a = amax > amax_floor ? amax : amax_floor;
      float s = a / 448.0f;
      s = s > scale_floor ? s : scale_floor;
      scales[m * G + g] = s;
      uint8_t* o = out + k0;
      if (!(s < __builtin_inff())) {
        for (int64_t k = 0; k < n; ++k) {
          const float v = FirstLane(LoadN(x, D, k0 + k, 1));
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          const uint32_t mag = bits & 0x7FFFFFFFu;
          o[k] = static_cast<uint8_t>(((bits >> 24) & 0x80u) | (mag > 0x7F800000u ? 0x7Fu : mag == 0x7F800000u ? 0x7Eu : 0u));
        }
        continue;
      }
      const V sv = Set1(s);
      auto quantize = [&](V v) VT_ALWAYS_INLINE {
        v = Div(v, sv);
        v = Min(Set1(448.0f), v);
        v = Max(Set1(-448.0f), v);
        return FloatToFp8Bits(v);
      };
      for (i = 0; i + kLanes <= n; i += kLanes) StoreU8(o + i, quantize(LoadAs<D>(x, k0 + i)));
      if (i < n) StoreFp8N(o, i, quantize(LoadN(x, D, k0 + i, TailLanes(n - i))), TailLanes(n - i));
    }
}

void QuantFp8Groups(const void* x, DType xd, uint8_t* out, float* scales, int64_t K, int64_t G, int64_t group_size,
                    float amax_floor, float scale_floor, int64_t row0, int64_t row1) {
  switch (xd) {
    case DType::kF32: return QuantGroupsOf<DType::kF32>(x, out, scales, K, G, group_size, amax_floor, scale_floor, row0, row1);
    case DType::kBF16:
      return QuantGroupsOf<DType::kBF16>(x, out, scales, K, G, group_size, amax_floor, scale_floor, row0, row1);
    default: return QuantGroupsOf<DType::kF16>(x, out, scales, K, G, group_size, amax_floor, scale_floor, row0, row1);
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
//
// Each row is walked in whole vectors first and then one partial vector. The whole-vector
// body is instantiated with n = kLanes as a constant, so its loads and stores fold to plain
// vector moves and the loop holds no call (a call would clobber every vector register and
// make the compiler rebuild the kernels' constants on each step).

using Full = std::integral_constant<int, kLanes>;

// Stores value(c, n) of the row's columns [0, width) in vectors: store(c, y, n) with n
// Full{} for whole vectors, then the int count of the last partial vector. Four vectors'
// values are formed before any of them is stored, so no store stands between one vector's
// loads and the next one's (the compiler must assume a store may alias them) and the
// four dependency chains overlap.
template <typename Value, typename Store>
VT_INLINE void ForVectors(int64_t width, Value&& value, Store&& store) {
  int64_t c = 0;
  for (; c + 4 * kLanes <= width; c += 4 * kLanes) {
    V y[4];
    for (int j = 0; j < 4; ++j) y[j] = value(c + j * kLanes, Full{});
    for (int j = 0; j < 4; ++j) store(c + j * kLanes, y[j], Full{});
  }
  for (; c + kLanes <= width; c += kLanes) store(c, value(c, Full{}), Full{});
  if (c < width) store(c, value(c, static_cast<int>(width - c)), static_cast<int>(width - c));
}

// How a row kernel reads its arguments' dtypes. AnyRows reads them at run time; Bf16Rows
// fixes the common model case (BF16 input, weight, gate and output) at compile time, so
// the loop bodies carry no dtype branch. Both compute the same bytes.
struct AnyRows {
  static DType X(const RowArgs& a) { return a.x_dtype; }
  static DType W(const RowArgs& a) { return a.weight_dtype; }
  static DType G(const RowArgs& a) { return a.gate_dtype; }
  // The row's output dtype, which is also the dtype it is rounded to between steps: BF16,
  // the recipe's intermediate, for a fused recipe.
  static DType Out(const RowArgs& a) { return a.fp8_out != nullptr ? DType::kBF16 : a.out_dtype; }
};

struct Bf16Rows {
  static constexpr DType X(const RowArgs&) { return DType::kBF16; }
  static constexpr DType W(const RowArgs&) { return DType::kBF16; }
  static constexpr DType G(const RowArgs&) { return DType::kBF16; }
  static constexpr DType Out(const RowArgs&) { return DType::kBF16; }
};

// Runs kernel(format): Bf16Rows when every dtype the kernel reads (x, and the weight and
// gate where it has them) and its output are BF16; AnyRows otherwise.
template <typename Kernel>
VT_INLINE void WithRowFormat(const RowArgs& a, Kernel&& kernel) {
  const auto bf16 = [](const void* p, DType d) { return p == nullptr || d == DType::kBF16; };
  if (a.x_dtype == DType::kBF16 && bf16(a.weight, a.weight_dtype) && bf16(a.gate, a.gate_dtype) &&
      AnyRows::Out(a) == DType::kBF16)
    return kernel(Bf16Rows{});
  kernel(AnyRows{});
}

// Columns per block of a fused recipe: the block's BF16 intermediate stays in L1.
constexpr int64_t kFusedBlock = 1024;

// This thread's buffer of at least n BF16 elements (a per-token-group recipe's wide row).
[[gnu::noinline]] uint16_t* WideRowBuffer(int64_t n) {
  static thread_local std::vector<uint16_t> wide;
  if (static_cast<int64_t>(wide.size()) < n) wide.resize(static_cast<size_t>(n));
  return wide.data();
}

// The last step of every row kernel: stores value(c, n) for the row's columns [0, width),
// rounded to the output dtype, at element base + c of out. A fused recipe runs it block by
// block into the BF16 intermediate (the side output where there is one, else a buffer in
// L1) and quantizes each block with QuantLoop right after: the same roundings as one
// kernel doing both per vector, but two short loops whose vectors the processor overlaps,
// where one long dependency chain per vector would leave it waiting.
//
// A per-token-group recipe (fp8_scales set) does the same in blocks of whole groups (the
// largest multiple of group_size that fits kFusedBlock), each quantized by QuantGroupsOf as
// the standalone op quantizes the BF16 tensor; a group wider than kFusedBlock (per-token
// FP8: the whole row) takes the row into a per-thread buffer first.
template <typename F, typename Value>
VT_INLINE void EmitRow(const RowArgs& a, const Fp8Scale& s, int64_t base, int64_t width, Value&& value) {
  const DType od = F::Out(a);
  if (a.fp8_out == nullptr) {
    ForVectors(width, value, [&](int64_t c, V y, auto n) VT_ALWAYS_INLINE { StoreN(a.out, od, base + c, y, n); });
    return;
  }
  alignas(64) uint16_t buffer[kFusedBlock];
  if (a.fp8_scales != nullptr) {
    const int64_t gs = a.group_size, groups = (width + gs - 1) / gs;
    const int64_t block = gs <= kFusedBlock ? kFusedBlock / gs * gs : width;
    uint16_t* row_buffer = buffer;
    if (block > kFusedBlock && a.out == nullptr) row_buffer = WideRowBuffer(block);
    float* scales = a.fp8_scales + base / width * groups;
    for (int64_t c0 = 0; c0 < width; c0 += block) {
      const int64_t w = width - c0 < block ? width - c0 : block;
      uint16_t* bf16 = a.out != nullptr ? static_cast<uint16_t*>(a.out) + base + c0 : row_buffer;
      ForVectors(
          w, [&](int64_t c, auto n) VT_ALWAYS_INLINE { return value(c0 + c, n); },
          [&](int64_t c, V y, auto n) VT_ALWAYS_INLINE { StoreN(bf16, od, c, y, n); });
      QuantGroupsOf<DType::kBF16>(bf16, a.fp8_out + base + c0, scales + c0 / gs, w, (w + gs - 1) / gs, gs,
                                  a.amax_floor, a.scale_floor, 0, 1);
    }
    return;
  }
  for (int64_t c0 = 0; c0 < width; c0 += kFusedBlock) {
    const int64_t w = width - c0 < kFusedBlock ? width - c0 : kFusedBlock;
    uint16_t* bf16 = a.out != nullptr ? static_cast<uint16_t*>(a.out) + base + c0 : buffer;
    ForVectors(
        w, [&](int64_t c, auto n) VT_ALWAYS_INLINE { return value(c0 + c, n); },
        [&](int64_t c, V y, auto n) VT_ALWAYS_INLINE { StoreN(bf16, od, c, y, n); });
    QuantLoop<DType::kBF16>(bf16, a.fp8_out + base + c0, 0, w, s);
  }
}

// numerics::RmsInverse.
VT_INLINE float RmsInverse(float sum_sq, int64_t n, float eps) {
  return 1.0f / __builtin_sqrtf(sum_sq / static_cast<float>(n) + eps);
}

// The canonical 32-lane sum of squares of the row's values value(c, n): lane j holds the
// elements at j mod 32, in column order. Blocks of 32 columns keep every accumulator's
// index constant; the last block's vectors go to the lane of their column.
template <typename Value>
VT_INLINE float SumOfSquares(int64_t width, Value&& value) {
  V acc[kAccs];
  for (V& v : acc) v = Zero();
  int64_t c = 0;
  for (; c + 32 <= width; c += 32) {
    for (int k = 0; k < kAccs; ++k) {
      const V v = value(c + k * kLanes, Full{});
      acc[k] = Fma(v, v, acc[k]);
    }
  }
  for (; c < width; c += kLanes) {
    const V v = c + kLanes <= width ? value(c, Full{}) : value(c, static_cast<int>(width - c));
    const int k = static_cast<int>((c & 31) / kLanes);
    acc[k] = Fma(v, v, acc[k]);
  }
  return CombineLanes(acc);
}

template <typename F, bool kZeroCentred>
void RmsNormRowsOf(const RowArgs& a, int64_t row0, int64_t row1) {
  const int64_t H = a.width;
  const DType xd = F::X(a), wd = F::W(a), td = F::Out(a);
  const Fp8Scale s(a.input_scale);
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    float sum_sq;
    if (a.residual != nullptr) {
      sum_sq = SumOfSquares(H, [&](int64_t c, auto n) VT_ALWAYS_INLINE {
        const V v = RoundTo(xd, Add(LoadN(a.x, xd, base + c, n), LoadN(a.residual, xd, base + c, n)));
        StoreN(a.residual, xd, base + c, v, n);
        return v;
      });
    } else {
      sum_sq = SumOfSquares(H, [&](int64_t c, auto n) VT_ALWAYS_INLINE { return LoadN(a.x, xd, base + c, n); });
    }
    const V inv = Set1(RmsInverse(sum_sq, H, a.eps));
    // With a residual the normalised value is the sum just written back (exact in xd).
    const void* src = a.residual != nullptr ? a.residual : a.x;
    EmitRow<F>(a, s, base, H, [&](int64_t c, auto n) VT_ALWAYS_INLINE {
      if constexpr (kZeroCentred) {  // (s * inv) * (1 + w), s * inv not rounded
        return Mul(Mul(LoadN(src, xd, base + c, n), inv), Add(Set1(1.0f), LoadN(a.weight, wd, c, n)));
      } else {
        const V t = RoundTo(td, Mul(LoadN(src, xd, base + c, n), inv));
        return Mul(t, LoadN(a.weight, wd, c, n));
      }
    });
  }
}

template <typename F>
void RmsNormGatedRowsOf(const RowArgs& a, int64_t row0, int64_t row1) {
  const int64_t H = a.width;
  const DType xd = F::X(a), wd = F::W(a), gd = F::G(a), td = F::Out(a);
  const Fp8Scale s(a.input_scale);
  for (int64_t r = row0; r < row1; ++r) {
    const int64_t base = r * H;
    const float sum_sq = SumOfSquares(H, [&](int64_t c, auto n) VT_ALWAYS_INLINE { return LoadN(a.x, xd, base + c, n); });
    const V inv = Set1(RmsInverse(sum_sq, H, a.eps));
    EmitRow<F>(a, s, base, H, [&](int64_t c, auto n) VT_ALWAYS_INLINE {
      const V t = RoundTo(td, Mul(LoadN(a.x, xd, base + c, n), inv));
      const V u = RoundTo(td, Mul(t, LoadN(a.weight, wd, c, n)));
      return Mul(u, Silu(LoadN(a.gate, gd, base + c, n)));
    });
  }
}

template <typename F>
void SiluMulRowsOf(const RowArgs& a, int64_t row0, int64_t row1) {
  const int64_t I = a.width;
  const DType xd = F::X(a);
  const Fp8Scale s(a.input_scale);
  for (int64_t r = row0; r < row1; ++r) {
    EmitRow<F>(a, s, r * I, I, [&](int64_t c, auto n) VT_ALWAYS_INLINE {
      return Mul(Silu(LoadN(a.x, xd, r * 2 * I + c, n)), LoadN(a.x, xd, r * 2 * I + I + c, n));
    });
  }
}

// ---- RotaryEmbedding ---------------------------------------------------------------------
//
// RotateRow in reference.cpp, a vector of pairs at a time: x1 = x[i], x2 = x[D/2 + i] (exact
// in f32), then x1*c - x2*s and x2*c + x1*s, each product and the difference or sum rounded in
// f32 (no contraction, see simd_vec.h), and one rounding to the dtype on the store. Both
// halves are loaded before either is stored. A half narrower than a vector (or its last part)
// goes through LoadN/StoreN, which touch no element past it.

template <DType D, typename N>
VT_INLINE void RotatePairs(void* head, int64_t half, int64_t i, const float* c, const float* s, N n) {
  const V x1 = LoadN(head, D, i, n), x2 = LoadN(head, D, half + i, n);
  const V cv = LoadN(c, DType::kF32, i, n), sv = LoadN(s, DType::kF32, i, n);
  const V y1 = Sub(Mul(x1, cv), Mul(x2, sv));
  const V y2 = Add(Mul(x2, cv), Mul(x1, sv));
  StoreN(head, D, i, y1, n);
  StoreN(head, D, half + i, y2, n);
}

template <DType D>
void RopeRowOf(void* x, int64_t heads, int64_t head_size, const float* c, const float* s) {
  const int64_t half = head_size / 2;
  for (int64_t h = 0; h < heads; ++h) {
    void* head = static_cast<unsigned char*>(x) + static_cast<size_t>(h * head_size) * ElemSize(D);
    int64_t i = 0;
    for (; i + kLanes <= half; i += kLanes) RotatePairs<D>(head, half, i, c, s, Full{});
    if (i < half) RotatePairs<D>(head, half, i, c, s, static_cast<int>(half - i));
  }
}

void RopeRow(void* x, DType xd, int64_t heads, int64_t head_size, const float* c, const float* s) {
  switch (xd) {
    case DType::kF32: return RopeRowOf<DType::kF32>(x, heads, head_size, c, s);
    case DType::kBF16: return RopeRowOf<DType::kBF16>(x, heads, head_size, c, s);
    default: return RopeRowOf<DType::kF16>(x, heads, head_size, c, s);
  }
}

// The kernels take a copy of the arguments: the fp8 (char) stores could otherwise alias
// them and force every field to be reloaded inside the loops.
void RmsNormRows(const RowArgs& args, int64_t row0, int64_t row1) {
  const RowArgs a = args;
  WithRowFormat(a, [&](auto f) {
    if (a.zero_centred)
      RmsNormRowsOf<decltype(f), true>(a, row0, row1);
    else
      RmsNormRowsOf<decltype(f), false>(a, row0, row1);
  });
}

void RmsNormGatedRows(const RowArgs& args, int64_t row0, int64_t row1) {
  const RowArgs a = args;
  WithRowFormat(a, [&](auto f) { RmsNormGatedRowsOf<decltype(f)>(a, row0, row1); });
}

void SiluMulRows(const RowArgs& args, int64_t row0, int64_t row1) {
  const RowArgs a = args;
  WithRowFormat(a, [&](auto f) { SiluMulRowsOf<decltype(f)>(a, row0, row1); });
}

}  // namespace
}  // namespace vt::cpu::VT_SIMD_NS
