// Element access by dtype for the portable CPU kernels.
#pragma once

#include <cstdint>

#include "vt/dtype.h"
#include "vt/error.h"

namespace vt::cpu {

inline float LoadFloat(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kBF16: return Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16: return F16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kF8E4M3: return Fp8E4M3ToFloat(static_cast<const uint8_t*>(base)[i]);
    default: throw Error(StrCat("internal: LoadFloat of ", DTypeName(dtype)));
  }
}

inline void StoreFloat(void* base, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[i] = v; return;
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = FloatToBf16(v); return;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = FloatToF16(v); return;
    default: throw Error(StrCat("internal: StoreFloat of ", DTypeName(dtype)));
  }
}

// v rounded to `dtype` and widened back to f32 (identity for F32).
inline float RoundTo(DType dtype, float v) {
  switch (dtype) {
    case DType::kF32: return v;
    case DType::kBF16: return Bf16ToFloat(FloatToBf16(v));
    case DType::kF16: return F16ToFloat(FloatToF16(v));
    default: throw Error(StrCat("internal: RoundTo ", DTypeName(dtype)));
  }
}

}  // namespace vt::cpu
