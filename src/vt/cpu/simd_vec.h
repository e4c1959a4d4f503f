// Vector primitives for the elementwise CPU kernels, and the vector forms of the exact
// scalar arithmetic in vt/detail/numerics.h (fp8 quantization, BF16/F16 rounding, Exp,
// Silu, the canonical 32-lane sum of squares).
//
// Included only by files compiled for one ISA (*_avx512.cpp, *_avx2.cpp, *_neon.cpp); the
// width is chosen by the compiler flags of that file. Everything here has internal linkage and
// lives in a namespace named after the ISA, so no inline function compiled with wide
// instructions is ever shared with the portable code.
//
// Each function performs the IEEE operations of its scalar counterpart in the same order,
// so results are bit-identical lane by lane. Floating point contraction is off for the
// rest of every file that includes this (a multiply feeding an add must not become an fma;
// the project's -ffp-contract=off says so too, this keeps it true for any build).
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif
// The matmul kernels' fp8 -> f16 decodes (DecodeFp8Over256 below).
#if defined(__AVX512F__)
#include "vt/cpu/avx512_common.h"
#elif defined(__AVX2__)
#include "vt/cpu/matmul/fp8_decode_avx2.h"
#elif defined(__aarch64__)
#include "vt/cpu/matmul/fp8_decode_neon.h"
#endif

#include <cstdint>
#include <cstring>

#include "vt/dtype.h"

// GCC 12 reports the deliberately undefined registers inside its AVX-512 intrinsics
// (_mm512_undefined_ps) as "(may be) used uninitialized" once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__AVX512F__)
#define VT_SIMD_NS avx512
#elif defined(__AVX2__)
#define VT_SIMD_NS avx2
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define VT_SIMD_NS neon
#else
#error "simd_vec.h needs -mavx2, -mavx512f or aarch64 NEON"
#endif

// Every primitive here is forced inline, and so are the loop bodies written as lambdas:
// past GCC's inlining budget a kernel would otherwise call Exp or the fp8 rounding out of
// line once per vector, and each call clobbers every vector register (all are
// caller-saved), so the kernel's constants are rebuilt around it.
#define VT_ALWAYS_INLINE __attribute__((always_inline))
#define VT_INLINE inline __attribute__((always_inline))

namespace vt::cpu::VT_SIMD_NS {
namespace {

// ---- ISA-specific primitives -------------------------------------------------------------

#if defined(__AVX512F__)

constexpr int kLanes = 16;
using V = __m512;
using VI = __m512i;
using M = __mmask16;

VT_INLINE V Set1(float f) { return _mm512_set1_ps(f); }
VT_INLINE VI Set1I(int32_t i) { return _mm512_set1_epi32(i); }
VT_INLINE V Add(V a, V b) { return _mm512_add_ps(a, b); }
VT_INLINE V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
VT_INLINE V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
VT_INLINE V Div(V a, V b) { return _mm512_div_ps(a, b); }
VT_INLINE V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
// min(a, b) = a < b ? a : b and max(a, b) = a > b ? a : b: a NaN in b passes through.
VT_INLINE V Min(V a, V b) { return _mm512_min_ps(a, b); }
VT_INLINE V Max(V a, V b) { return _mm512_max_ps(a, b); }
VT_INLINE V AsF(VI i) { return _mm512_castsi512_ps(i); }
VT_INLINE VI AsI(V f) { return _mm512_castps_si512(f); }
VT_INLINE VI AddI(VI a, VI b) { return _mm512_add_epi32(a, b); }
VT_INLINE VI SubI(VI a, VI b) { return _mm512_sub_epi32(a, b); }
VT_INLINE VI AndI(VI a, VI b) { return _mm512_and_si512(a, b); }
VT_INLINE VI OrI(VI a, VI b) { return _mm512_or_si512(a, b); }
VT_INLINE VI XorI(VI a, VI b) { return _mm512_xor_si512(a, b); }
template <int N> VT_INLINE VI Srl(VI a) { return _mm512_srli_epi32(a, N); }
template <int N> VT_INLINE VI Sra(VI a) { return _mm512_srai_epi32(a, N); }
template <int N> VT_INLINE VI Sll(VI a) { return _mm512_slli_epi32(a, N); }
VT_INLINE VI CvtI(V a) { return _mm512_cvtps_epi32(a); }   // current rounding (nearest)
VT_INLINE VI CvttI(V a) { return _mm512_cvttps_epi32(a); }  // truncation
VT_INLINE M LtI(VI a, VI b) { return _mm512_cmplt_epi32_mask(a, b); }
VT_INLINE M GtI(VI a, VI b) { return _mm512_cmpgt_epi32_mask(a, b); }
VT_INLINE M GeI(VI a, VI b) { return _mm512_cmpge_epi32_mask(a, b); }
VT_INLINE M GtF(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
VT_INLINE M LtF(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
VT_INLINE M IsNan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
VT_INLINE V Select(M m, V yes, V no) { return _mm512_mask_blend_ps(m, no, yes); }
VT_INLINE VI SelectI(M m, VI yes, VI no) { return _mm512_mask_blend_epi32(m, no, yes); }

VT_INLINE V LoadF32(const float* p) { return _mm512_loadu_ps(p); }
VT_INLINE VI LoadU16(const uint16_t* p) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
VT_INLINE VI LoadU8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
VT_INLINE V CvtIToF(VI a) { return _mm512_cvtepi32_ps(a); }  // exact below 2^24
// F16 -> F32 by the converter instruction; NaN lanes are redone in integers below.
VT_INLINE V HalfToFloatHw(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
VT_INLINE void StoreF32(float* p, V v) { _mm512_storeu_ps(p, v); }
// Low 16 bits of each lane.
VT_INLINE void StoreU16(uint16_t* p, VI v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
}
// Low 8 bits of each lane.
VT_INLINE void StoreU8(uint8_t* p, VI v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v)); }
VT_INLINE void StoreF16(uint16_t* p, V v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
VT_INLINE V RoundTripF16Hw(V v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }

// Canonical lanes 0-15 and 16-31 of the 32-lane sum of squares.
constexpr int kAccs = 2;
// lane[j] += lane[j + off] for off = 16, 8, 4, 2, 1; returns lane 0.
VT_INLINE float CombineLanes(const V (&acc)[kAccs]) {
  const V s16 = Add(acc[0], acc[1]);
  const __m256 lo = _mm512_castps512_ps256(s16);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s16), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// The sum of the lanes, in the instruction sequence's own order.
VT_INLINE float SumLanes(V v) { return _mm512_reduce_add_ps(v); }
VT_INLINE float FirstLane(V v) { return _mm512_cvtss_f32(v); }

#elif defined(__aarch64__)

constexpr int kLanes = 4;
using V = float32x4_t;
using VI = int32x4_t;
using M = uint32x4_t;  // all-ones lanes where true

VT_INLINE V Set1(float f) { return vdupq_n_f32(f); }
VT_INLINE VI Set1I(int32_t i) { return vdupq_n_s32(i); }
VT_INLINE V Add(V a, V b) { return vaddq_f32(a, b); }
VT_INLINE V Sub(V a, V b) { return vsubq_f32(a, b); }
VT_INLINE V Mul(V a, V b) { return vmulq_f32(a, b); }
VT_INLINE V Div(V a, V b) { return vdivq_f32(a, b); }
VT_INLINE V Fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
// The x86 semantics (a < b ? a : b, a > b ? a : b: a NaN in b passes through), not FMIN's.
VT_INLINE V Min(V a, V b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
VT_INLINE V Max(V a, V b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
VT_INLINE V AsF(VI i) { return vreinterpretq_f32_s32(i); }
VT_INLINE VI AsI(V f) { return vreinterpretq_s32_f32(f); }
VT_INLINE VI AddI(VI a, VI b) { return vaddq_s32(a, b); }
VT_INLINE VI SubI(VI a, VI b) { return vsubq_s32(a, b); }
VT_INLINE VI AndI(VI a, VI b) { return vandq_s32(a, b); }
VT_INLINE VI OrI(VI a, VI b) { return vorrq_s32(a, b); }
VT_INLINE VI XorI(VI a, VI b) { return veorq_s32(a, b); }
template <int N> VT_INLINE VI Srl(VI a) { return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(a), N)); }
template <int N> VT_INLINE VI Sra(VI a) { return vshrq_n_s32(a, N); }
template <int N> VT_INLINE VI Sll(VI a) { return vshlq_n_s32(a, N); }
VT_INLINE VI CvtI(V a) { return vcvtnq_s32_f32(a); }  // nearest, ties to even
VT_INLINE VI CvttI(V a) { return vcvtq_s32_f32(a); }  // truncation
VT_INLINE M LtI(VI a, VI b) { return vcltq_s32(a, b); }
VT_INLINE M GtI(VI a, VI b) { return vcgtq_s32(a, b); }
VT_INLINE M GeI(VI a, VI b) { return vcgeq_s32(a, b); }
VT_INLINE M GtF(V a, V b) { return vcgtq_f32(a, b); }
VT_INLINE M LtF(V a, V b) { return vcltq_f32(a, b); }
VT_INLINE M IsNan(V a) { return vmvnq_u32(vceqq_f32(a, a)); }
VT_INLINE V Select(M m, V yes, V no) { return vbslq_f32(m, yes, no); }
VT_INLINE VI SelectI(M m, VI yes, VI no) { return vbslq_s32(m, yes, no); }

VT_INLINE V LoadF32(const float* p) { return vld1q_f32(p); }
VT_INLINE VI LoadU16(const uint16_t* p) { return vreinterpretq_s32_u32(vmovl_u16(vld1_u16(p))); }
VT_INLINE VI LoadU8(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(w)))));
}
VT_INLINE V CvtIToF(VI a) { return vcvtq_f32_s32(a); }  // exact below 2^24
// F16 -> F32 by FCVTL; NaN lanes are redone in integers below.
VT_INLINE V HalfToFloatHw(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
VT_INLINE void StoreF32(float* p, V v) { vst1q_f32(p, v); }
// Low 16 bits of each lane.
VT_INLINE void StoreU16(uint16_t* p, VI v) { vst1_u16(p, vmovn_u32(vreinterpretq_u32_s32(v))); }
// Low 8 bits of each lane.
VT_INLINE void StoreU8(uint8_t* p, VI v) {
  const uint16x4_t h = vmovn_u32(vreinterpretq_u32_s32(v));
  const uint32_t w = vget_lane_u32(vreinterpret_u32_u8(vmovn_u16(vcombine_u16(h, h))), 0);
  std::memcpy(p, &w, 4);
}
// FCVTN rounds to nearest even (the FPCR default, which Linux keeps).
VT_INLINE void StoreF16(uint16_t* p, V v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }
VT_INLINE V RoundTripF16Hw(V v) { return vcvt_f32_f16(vcvt_f16_f32(v)); }

// Canonical lanes 0-3, 4-7, ..., 28-31.
constexpr int kAccs = 8;
VT_INLINE float CombineLanes(const V (&acc)[kAccs]) {
  V s[4];
  for (int k = 0; k < 4; ++k) s[k] = Add(acc[k], acc[k + 4]);  // lanes 0-15 += 16-31
  const V t0 = Add(s[0], s[2]), t1 = Add(s[1], s[3]);           // lanes 0-7 += 8-15
  const V u = Add(t0, t1);                                      // lanes 0-3 += 4-7
  const V w = Add(u, vextq_f32(u, u, 2));                       // lanes 0-1 += 2-3
  return vgetq_lane_f32(w, 0) + vgetq_lane_f32(w, 1);
}

VT_INLINE float FirstLane(V v) { return vgetq_lane_f32(v, 0); }
VT_INLINE float SumLanes(V v) { return vaddvq_f32(v); }

#else  // AVX2

constexpr int kLanes = 8;
using V = __m256;
using VI = __m256i;
using M = __m256i;  // all-ones lanes where true

VT_INLINE V Set1(float f) { return _mm256_set1_ps(f); }
VT_INLINE VI Set1I(int32_t i) { return _mm256_set1_epi32(i); }
VT_INLINE V Add(V a, V b) { return _mm256_add_ps(a, b); }
VT_INLINE V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
VT_INLINE V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
VT_INLINE V Div(V a, V b) { return _mm256_div_ps(a, b); }
VT_INLINE V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
VT_INLINE V Min(V a, V b) { return _mm256_min_ps(a, b); }
VT_INLINE V Max(V a, V b) { return _mm256_max_ps(a, b); }
VT_INLINE V AsF(VI i) { return _mm256_castsi256_ps(i); }
VT_INLINE VI AsI(V f) { return _mm256_castps_si256(f); }
VT_INLINE VI AddI(VI a, VI b) { return _mm256_add_epi32(a, b); }
VT_INLINE VI SubI(VI a, VI b) { return _mm256_sub_epi32(a, b); }
VT_INLINE VI AndI(VI a, VI b) { return _mm256_and_si256(a, b); }
VT_INLINE VI OrI(VI a, VI b) { return _mm256_or_si256(a, b); }
VT_INLINE VI XorI(VI a, VI b) { return _mm256_xor_si256(a, b); }
template <int N> VT_INLINE VI Srl(VI a) { return _mm256_srli_epi32(a, N); }
template <int N> VT_INLINE VI Sra(VI a) { return _mm256_srai_epi32(a, N); }
template <int N> VT_INLINE VI Sll(VI a) { return _mm256_slli_epi32(a, N); }
VT_INLINE VI CvtI(V a) { return _mm256_cvtps_epi32(a); }
VT_INLINE VI CvttI(V a) { return _mm256_cvttps_epi32(a); }
VT_INLINE M LtI(VI a, VI b) { return _mm256_cmpgt_epi32(b, a); }
VT_INLINE M GtI(VI a, VI b) { return _mm256_cmpgt_epi32(a, b); }
VT_INLINE M GeI(VI a, VI b) { return _mm256_xor_si256(_mm256_cmpgt_epi32(b, a), _mm256_set1_epi32(-1)); }
VT_INLINE M GtF(V a, V b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
VT_INLINE M LtF(V a, V b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
VT_INLINE M IsNan(V a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
VT_INLINE V Select(M m, V yes, V no) { return _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(m)); }
VT_INLINE VI SelectI(M m, VI yes, VI no) { return _mm256_blendv_epi8(no, yes, m); }

VT_INLINE V LoadF32(const float* p) { return _mm256_loadu_ps(p); }
VT_INLINE VI LoadU16(const uint16_t* p) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
VT_INLINE VI LoadU8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
VT_INLINE V CvtIToF(VI a) { return _mm256_cvtepi32_ps(a); }  // exact below 2^24
VT_INLINE V HalfToFloatHw(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
VT_INLINE void StoreF32(float* p, V v) { _mm256_storeu_ps(p, v); }
VT_INLINE void StoreU16(uint16_t* p, VI v) {
  // packus works per 128-bit half: [v0..v3 v0..v3 | v4..v7 v4..v7]; gather quadwords 0 and 2.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
VT_INLINE void StoreU8(uint8_t* p, VI v) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(v, pick);
  const __m128i bytes = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), bytes);
}
VT_INLINE void StoreF16(uint16_t* p, V v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
VT_INLINE V RoundTripF16Hw(V v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }

// Canonical lanes 0-7, 8-15, 16-23 and 24-31.
constexpr int kAccs = 4;
VT_INLINE float CombineLanes(const V (&acc)[kAccs]) {
  const V s16 = Add(acc[0], acc[2]);  // lanes 0-7 += 16-23
  const V t16 = Add(acc[1], acc[3]);  // lanes 8-15 += 24-31
  const V s8 = Add(s16, t16);         // lanes 0-7 += 8-15
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

VT_INLINE float FirstLane(V v) { return _mm256_cvtss_f32(v); }
VT_INLINE float SumLanes(V v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

#endif

static_assert(kLanes * kAccs == 32, "the canonical sum of squares has 32 lanes");

VT_INLINE V Zero() { return Set1(0.0f); }

// ---- conversions, as vt/dtype.h defines them --------------------------------------------

VT_INLINE V Bf16BitsToFloat(VI h) { return AsF(Sll<16>(h)); }

// F16 -> F32, exact; NaN keeps its payload unquietened as F16ToFloat does.
VT_INLINE V HalfToFloat(const uint16_t* p) {
  const V hw = HalfToFloatHw(p);
  const VI h = LoadU16(p);
  const M nan = GtI(AndI(h, Set1I(0x7FFF)), Set1I(0x7C00));
  const VI bits = OrI(OrI(Sll<16>(AndI(h, Set1I(0x8000))), Set1I(0x7F800000)), Sll<13>(AndI(h, Set1I(0x3FF))));
  return Select(nan, AsF(bits), hw);
}

// FloatToBf16: round to nearest even; NaN -> quiet NaN with its sign. Result in the low
// 16 bits of each lane.
VT_INLINE VI FloatToBf16Bits(V v) {
  const VI u = AsI(v);
  const M nan = GtI(AndI(u, Set1I(0x7FFFFFFF)), Set1I(0x7F800000));
  const VI lsb = AndI(Srl<16>(u), Set1I(1));
  const VI rounded = Srl<16>(AddI(AddI(u, Set1I(0x7FFF)), lsb));
  return SelectI(nan, OrI(Srl<16>(u), Set1I(0x40)), rounded);
}

// Bf16ToFloat(FloatToBf16(v)).
VT_INLINE V Bf16Round(V v) { return Bf16BitsToFloat(FloatToBf16Bits(v)); }

// F16ToFloat(FloatToF16(v)).
VT_INLINE V F16Round(V v) { return RoundTripF16Hw(v); }

// FloatToFp8E4M3 for |v| <= 448 or NaN (QuantFp8Static's range after the clamp); larger
// magnitudes and Inf give NaN as the scalar conversion does. Code in the low 8 bits.
VT_INLINE V RoundToInteger(V v) {  // v + 2^23 - 2^23: nearest integer, ties to even (v >= 0)
  return Sub(Add(v, Set1(0x1p23f)), Set1(0x1p23f));
}
VT_INLINE VI FloatToFp8Bits(V v) {
  const VI u = AsI(v);
  const VI sign = AndI(Srl<24>(u), Set1I(0x80));
  const VI a = AndI(u, Set1I(0x7FFFFFFF));
  // Normal: rebias 127 -> 7 and round the 20 dropped bits to nearest even.
  const VI lsb = AndI(Srl<20>(a), Set1I(1));
  const VI normal = SubI(Srl<20>(AddI(AddI(a, Set1I(0x7FFFF)), lsb)), Set1I(120 << 3));
  // Below 2^-6: the integer mantissa a * 2^9 in [0, 8], rounded to nearest even.
  const VI subnormal = CvttI(RoundToInteger(Mul(AsF(a), Set1(0x1p9f))));
  VI q = SelectI(LtI(a, Set1I(0x3C800000)), subnormal, normal);
  q = SelectI(GeI(a, Set1I(0x43F00000)), Set1I(0x7F), q);
  return OrI(q, sign);
}

// QuantFp8Static's element step: clamp(x * inv, -448, 448), NaN kept, then e4m3fn RNE.
struct Fp8Scale {
  explicit Fp8Scale(float input_scale) : inv(Set1(1.0f / input_scale)), scale(Set1(input_scale)) {}
  V inv;    // 1.0f / input_scale, formed once in f32
  V scale;  // input_scale itself (never used to divide; kept for diagnostics and mutants)
};
VT_INLINE VI QuantizeFp8(V x, const Fp8Scale& s) {
  V v = Mul(x, s.inv);
  v = Min(Set1(448.0f), v);
  v = Max(Set1(-448.0f), v);
  return FloatToFp8Bits(v);
}

// ---- numerics::Exp and numerics::Silu ----------------------------------------------------

VT_INLINE V Exp(V x) {
  // numerics::RoundEven: + 1.5 * 2^23 - 1.5 * 2^23 rounds either sign to nearest even.
  const V n = Sub(Add(Mul(x, Set1(1.44269502162933349609375f)), Set1(12582912.0f)), Set1(12582912.0f));
  V r = Fma(n, Set1(-0.693145751953125f), x);
  r = Fma(n, Set1(-1.428606765330187045e-06f), r);
  V p = Set1(1.0f / 5040.0f);
  p = Fma(p, r, Set1(1.0f / 720.0f));
  p = Fma(p, r, Set1(1.0f / 120.0f));
  p = Fma(p, r, Set1(1.0f / 24.0f));
  p = Fma(p, r, Set1(1.0f / 6.0f));
  p = Fma(p, r, Set1(0.5f));
  p = Fma(p, r, Set1(1.0f));
  p = Fma(p, r, Set1(1.0f));
  const VI ni = CvtI(n);
  const VI n1 = Sra<1>(AddI(ni, Srl<31>(ni)));  // ni / 2, truncated toward zero as in C++
  const VI n2 = SubI(ni, n1);
  const V s1 = AsF(Sll<23>(AddI(n1, Set1I(127))));
  const V s2 = AsF(Sll<23>(AddI(n2, Set1I(127))));
  V e = Mul(Mul(p, s1), s2);
  e = Select(GtF(x, Set1(88.72283935546875f)), AsF(Set1I(0x7F800000)), e);
  e = Select(LtF(x, Set1(-103.97208404541015625f)), Zero(), e);
  return Select(IsNan(x), x, e);
}

VT_INLINE V Neg(V x) { return AsF(XorI(AsI(x), Set1I(static_cast<int32_t>(0x80000000u)))); }

VT_INLINE V Silu(V x) { return Div(x, Add(Set1(1.0f), Exp(Neg(x)))); }

// ---- loads and stores by dtype (F32, BF16, F16 values; fp8 codes) ------------------------

// e4m3fn codes (one per lane) -> their exact values, as Fp8E4M3ToFloat: normal codes by
// rebiasing the exponent into the float's bits, subnormals as m * 2^-9, S.1111.111 as a
// quiet NaN with the code's sign.
VT_INLINE V DecodeFp8(VI c) {
  const VI e = AndI(Srl<3>(c), Set1I(15));
  const VI m = AndI(c, Set1I(7));
  const VI normal = OrI(Sll<23>(AddI(e, Set1I(120))), Sll<20>(m));
  const VI subnormal = AsI(Mul(CvtIToF(m), Set1(0x1p-9f)));
  VI mag = SelectI(LtI(e, Set1I(1)), subnormal, normal);
  mag = SelectI(GeI(AndI(c, Set1I(0x7F)), Set1I(0x7F)), Set1I(0x7FC00000), mag);
  return AsF(OrI(mag, Sll<24>(AndI(c, Set1I(0x80)))));
}

// The lane sums of a0..a3 into out[0..3] (AVX-512: one transposing reduction, the matmul
// kernels' Hsum4; elsewhere SumLanes of each).
VT_INLINE void SumLanes4(V a0, V a1, V a2, V a3, float* out) {
#if defined(__AVX512F__)
  _mm_storeu_ps(out, matmul::Hsum4(a0, a1, a2, a3));
#elif defined(__AVX2__)
  // Pairwise: lane k of h holds a_k's lanes 0-3 (low half) or 4-7 (high half) summed.
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#else
  out[0] = SumLanes(a0);
  out[1] = SumLanes(a1);
  out[2] = SumLanes(a2);
  out[3] = SumLanes(a3);
#endif
}

// The sums of the lanes of a0 and a1 into out[0], out[1].
VT_INLINE void SumLanes2(V a0, V a1, float* out) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  const __m256 h = _mm256_hadd_ps(a0, a1);  // a0 01 23, a1 01 23 | a0 45 67, a1 45 67
  const __m128 f = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 g = _mm_hadd_ps(f, f);  // a0, a1, a0, a1
  _mm_storel_pi(reinterpret_cast<__m64*>(out), g);
#else
  out[0] = SumLanes(a0);
  out[1] = SumLanes(a1);
#endif
}

// kLanes fp8 codes at p -> their exact values times 2^-8 (exact: the smallest subnormal
// becomes 2^-17), NaN codes a NaN (x86: sign not kept; NEON: Fp8E4M3ToFloat's NaN times
// 2^-8, the same bits). By the matmul kernels' fp8 -> f16 trick and the converter
// instruction (x86 VCVTPH2PS, NEON FCVTL), about a third of DecodeFp8's instructions; times
// 2^8·scale in f32 this is KvCacheDequantizeFp8(code, scale) bit for bit (the product of
// the same reals, rounded once) wherever 2^8·scale is finite. kNaN false: the caller knows
// the codes hold no NaN (S.1111.111), and the half-trick forms (x86, NEON) skip its test.
template <bool kNaN = true>
VT_INLINE V DecodeFp8Over256(const uint8_t* p) {
#if defined(__AVX512F__)
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kNaN) return _mm512_cvtph_ps(matmul::Fp8ToHalf16(x));
  return _mm512_cvtph_ps(matmul::Fp8ToHalf16NoNaN(x));
#elif defined(__AVX2__)
  // Eight codes in 128-bit lanes: sign-extended, shifted left by 7, bit 14 cleared.
  const __m128i s = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  __m128i h = _mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80)));
  if constexpr (kNaN)
    h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7E00),
                        _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x3F80)));
  return _mm256_cvtph_ps(h);
#else
  uint32_t w;
  std::memcpy(&w, p, 4);
  uint16x8_t h = matmul::Fp8ToHalf8(vreinterpret_s8_u32(vdup_n_u32(w)));
  if constexpr (kNaN) h = matmul::Fp8HalfSignedNaN(h);
  return matmul::HalfLo(h);
#endif
}

// 2·kLanes codes at p -> DecodeFp8Over256<kNaN>(p) in x0 and (p + kLanes) in x1; on AVX2
// from one 16-byte load, widened in one 256-bit register (Fp8ToF32x16); on NEON from one
// 8-byte load, one vector of 8 halves.
template <bool kNaN = true>
VT_INLINE void DecodeFp8Over256Pair(const uint8_t* p, V& x0, V& x1) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  matmul::Fp8ToF32x16<kNaN>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), x0, x1);
#elif defined(__aarch64__)
  uint16x8_t h = matmul::Fp8ToHalf8(vreinterpret_s8_u8(vld1_u8(p)));
  if constexpr (kNaN) h = matmul::Fp8HalfSignedNaN(h);
  x0 = matmul::HalfLo(h);
  x1 = matmul::HalfHi(h);
#else
  x0 = DecodeFp8Over256<kNaN>(p);
  x1 = DecodeFp8Over256<kNaN>(p + kLanes);
#endif
}

// n (<= kLanes) fp8 codes at element i, decoded; missing lanes read as code 0 (+0).
VT_INLINE V LoadFp8N(const uint8_t* base, int64_t i, int n) {
  if (n == kLanes) return DecodeFp8(LoadU8(base + i));
  alignas(64) uint8_t buf[16] = {};
  std::memcpy(buf, base + i, static_cast<size_t>(n));
  return DecodeFp8(LoadU8(buf));
}

VT_INLINE V Load(const void* base, DType d, int64_t i) {
  switch (d) {
    case DType::kF32: return LoadF32(static_cast<const float*>(base) + i);
    case DType::kBF16: return Bf16BitsToFloat(LoadU16(static_cast<const uint16_t*>(base) + i));
    default: return HalfToFloat(static_cast<const uint16_t*>(base) + i);
  }
}

VT_INLINE void Store(void* base, DType d, int64_t i, V v) {
  switch (d) {
    case DType::kF32: StoreF32(static_cast<float*>(base) + i, v); return;
    case DType::kBF16: StoreU16(static_cast<uint16_t*>(base) + i, FloatToBf16Bits(v)); return;
    default: StoreF16(static_cast<uint16_t*>(base) + i, v); return;
  }
}

VT_INLINE size_t ElemSize(DType d) { return d == DType::kF32 ? 4 : 2; }

// n elements (n <= kLanes) at element i; missing lanes read as +0. Tails go through a
// zeroed buffer so no load or store touches memory past the end. n may be
// std::integral_constant<int, kLanes>: that instantiation is the whole-vector move alone.
template <typename N>
VT_INLINE V LoadN(const void* base, DType d, int64_t i, N n) {
  if (n == kLanes) return Load(base, d, i);
  const size_t es = ElemSize(d);
  alignas(64) unsigned char buf[kLanes * 4] = {};
  std::memcpy(buf, static_cast<const unsigned char*>(base) + static_cast<size_t>(i) * es, static_cast<size_t>(n) * es);
  return Load(buf, d, 0);
}

template <typename N>
VT_INLINE void StoreN(void* base, DType d, int64_t i, V v, N n) {
  if (n == kLanes) return Store(base, d, i, v);
  const size_t es = ElemSize(d);
  alignas(64) unsigned char buf[kLanes * 4];
  Store(buf, d, 0, v);
  std::memcpy(static_cast<unsigned char*>(base) + static_cast<size_t>(i) * es, buf, static_cast<size_t>(n) * es);
}

template <typename N>
VT_INLINE void StoreFp8N(uint8_t* base, int64_t i, VI codes, N n) {
  if (n == kLanes) return StoreU8(base + i, codes);
  alignas(64) uint8_t buf[kLanes];
  StoreU8(buf, codes);
  std::memcpy(base + i, buf, static_cast<size_t>(n));
}

// v rounded to `d` and widened back (identity for F32), as cpu::RoundTo.
VT_INLINE V RoundTo(DType d, V v) {
  switch (d) {
    case DType::kF32: return v;
    case DType::kBF16: return Bf16Round(v);
    default: return F16Round(v);
  }
}

}  // namespace
}  // namespace vt::cpu::VT_SIMD_NS
