// Element types and exact scalar conversions between them.
//
// F8E4M3 is OCP FP8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits, max finite 448,
// smallest subnormal 2^-9, no infinities, NaN = S.1111.111. It is a dtype of its own,
// never "bytes in an int8".
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

// Scalar conversions are usable from CUDA device code too.
#if defined(__CUDACC__)
#define VT_HD __host__ __device__ __forceinline__
#else
#define VT_HD inline
#endif

namespace vt {

namespace detail {
VT_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
VT_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}
}  // namespace detail

enum class DType : int8_t { kF32 = 0, kF16, kBF16, kF8E4M3, kI32, kI64, kU8 };
inline constexpr int kNumDTypes = 7;

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // as printed in messages: "F32", "BF16", "F8E4M3", ...
  size_t size;            // bytes per element
  bool is_float;
};

inline constexpr DTypeInfo kDTypeTable[] = {
    {DType::kF32, "F32", 4, true},      {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},    {DType::kF8E4M3, "F8E4M3", 1, true},
    {DType::kI32, "I32", 4, false},     {DType::kI64, "I64", 8, false},
    {DType::kU8, "U8", 1, false},
};
static_assert(std::size(kDTypeTable) == kNumDTypes, "kDTypeTable must cover every DType");
static_assert([] {
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<int>(kDTypeTable[i].dtype) != i) return false;
  return true;
}(), "kDTypeTable must be in enum order");

constexpr const DTypeInfo& Info(DType t) { return kDTypeTable[static_cast<int>(t)]; }
constexpr size_t DTypeSize(DType t) { return Info(t).size; }
constexpr std::string_view DTypeName(DType t) { return Info(t).name; }

// ---- BF16 ----------------------------------------------------------------------------

VT_HD float Bf16ToFloat(uint16_t h) { return detail::BitsFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays NaN (quieted, sign kept); +-Inf stays +-Inf.
VT_HD uint16_t FloatToBf16(float f) {
  uint32_t u = detail::FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// ---- F16 (IEEE binary16) ---------------------------------------------------------------

VT_HD float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return detail::BitsFloat(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in f32.
    float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  return detail::BitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest even, subnormals included; overflow to +-Inf; NaN stays NaN.
VT_HD uint16_t FloatToF16(float f) {
  uint32_t u = detail::FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((u >> 13) & 0x3FFu);
  if (u >= 0x477FF000u) return sign | 0x7C00u;  // rounds past 65504: Inf
  if (u < 0x38800000u) {
    // Below 2^-14: subnormal half. a * 2^24 (exact) is the integer mantissa in [0, 1024];
    // adding and subtracting 2^23 rounds it to nearest even; 1024 is the smallest normal.
    const float scaled = detail::BitsFloat(u) * 0x1p24f;
    const float r = (scaled + 0x1p23f) - 0x1p23f;
    return sign | static_cast<uint16_t>(static_cast<uint32_t>(r));
  }
  // Normal: rebias exponent and round the 13 dropped bits to nearest even.
  uint32_t h = ((u >> 13) - (112u << 10));
  const uint32_t rest = u & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

// ---- F8E4M3 (e4m3fn) -----------------------------------------------------------------

VT_HD float Fp8E4M3ToFloat(uint8_t b) {
  const bool neg = b & 0x80u;
  const uint32_t exp = (b >> 3) & 0xFu;
  const uint32_t man = b & 0x7u;
  float v;
  if (exp == 0xF && man == 0x7) {
    v = detail::BitsFloat(0x7FC00000u);
  } else if (exp == 0) {
    v = static_cast<float>(man) * 0x1p-9f;
  } else {
    v = detail::BitsFloat(((exp + 120u) << 23) | (man << 20));
  }
  return neg ? -v : v;
}

// Round to nearest even on the e4m3fn grid, subnormals included. NaN -> NaN with its sign.
// A magnitude that rounds past 448 (above 464; 464 itself ties to even 448), and +-Inf,
// become NaN, as PyTorch's float8_e4m3fn cast does; QuantFp8Static clamps to [-448, 448]
// before converting, so it never meets them.
VT_HD uint8_t FloatToFp8E4M3(float f) {
  uint32_t u = detail::FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7FFFFFFFu;
  if (u >= 0x43F00000u) return sign | 0x7Fu;  // >= 480, Inf or NaN
  if (u < 0x3C800000u) {
    // Below 2^-6: subnormal (or zero). a * 2^9 is the integer mantissa in [0, 8];
    // the magic add rounds it to nearest even; 8 becomes the smallest normal 0x08.
    const float scaled = detail::BitsFloat(u) * 0x1p9f;
    const float r = (scaled + 0x1p23f) - 0x1p23f;
    return sign | static_cast<uint8_t>(static_cast<uint32_t>(r));
  }
  // Normal: exponent rebias 127 -> 7, keep 3 mantissa bits, RNE on the 20 dropped bits.
  uint32_t q = (u >> 20) - (120u << 3);
  const uint32_t rest = u & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (q & 1u))) ++q;
  return sign | static_cast<uint8_t>(q);
}

constexpr float kFp8E4M3Max = 448.0f;

}  // namespace vt
