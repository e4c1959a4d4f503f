// Whether fp8 e4m3 codes hold a NaN (S.1111.111), for kernels whose fast decodes make NaN
// codes finite and which therefore check the codes first (the FP8 KV cache read in place,
// cpu/attention_simd.h; MatmulFp8GroupScaled's weight note, matmul/fp8_group_scaled.cpp).
// Internal linkage on purpose, as matmul/local.h explains: each ISA-specific file gets its
// own copy.
#pragma once

#include <cstdint>
#include <cstring>

namespace vt::cpu {
namespace {

// Any NaN code among the n bytes at p: eight at a time, per byte b, (b & 0x7F) + 1 reaches
// bit 7 only for 0x7F, and never carries into the next byte.
[[maybe_unused]] inline bool AnyFp8NaNCode(const uint8_t* p, int64_t n) {
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7FULL, kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
  uint64_t hit = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    hit |= (w & kLow7) + kOnes;
  }
  for (; i < n; ++i) hit |= static_cast<uint64_t>((p[i] & 0x7Fu) + 1u);
  return (hit & kHigh) != 0;
}

}  // namespace
}  // namespace vt::cpu
