// Internal to the tensor-core decode attention (attention_decode_mma.cu and its two forms,
// DecodeMmaRows there and DecodeMmaRowsN in attention_decode_heads_n.cuh): the CTA shape,
// the staged F8E4M3 tile layout and the F16 fragment helpers both forms use.
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/attention_tile.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/mma_sm80.cuh"

namespace vt::cuda {

constexpr int kWarps = 4;             // each takes 16 tokens of a tile
constexpr int kMaxGroup = 8;          // query heads per KV head: rows 0..7 of the operand
constexpr int kSpan = kTileTok;       // a split's tokens are whole tiles

// Staged F8E4M3 rows, in bytes: K rows whose lanes' 16-byte reads (two tokens a quarter warp)
// fall in distinct banks, V rows likewise for reads of four tokens a quarter warp.
constexpr int Fp8KRow(int D) { return D == 64 ? 64 : D + 64; }
constexpr int Fp8VRow(int D) { return D + 16; }
constexpr int Fp8StageBytes(int D) { return kTileTok * (Fp8KRow(D) + Fp8VRow(D)); }
constexpr size_t StagedBytes(int D, bool fp8) {
  return fp8 ? size_t{2} * Fp8StageBytes(D) : TwoTileSmemBytes(D);
}

__device__ __forceinline__ uint32_t PackF16(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
}

// Two e4m3 codes (the low 16 bits; the lower byte the lower element) -> two F16, exact.
__device__ __forceinline__ uint32_t Fp8PairToF16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// c += a b with F16 operands (the layouts of Mma).
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// An 8x8 matrix of 16-bit values in fragment layout (lane l: row l / 4, columns 2 (l % 4)
// and +1), transposed across the warp.
__device__ __forceinline__ uint32_t MovMatrixTrans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// SplitP for F16 operands: p = hi + lo, each rounded to F16.
__device__ __forceinline__ void SplitPF16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = PackF16(x0, x1);
  lo = PackF16(x0 - __half2float(__float2half_rn(x0)), x1 - __half2float(__float2half_rn(x1)));
}

// Tokens [tok0, tok0 + count) of KV head kh of an F8E4M3 cache into a stage as stored (K rows
// of Fp8KRow bytes, then V rows of Fp8VRow), by cp.async; rows past count are zero (a masked
// token's value bytes must not be a NaN code). Token skip_tok's row is left to StageRowFp8.
// Called by all kThreads threads (the pattern of StageTile).
template <int D, int kThreads>
__device__ __forceinline__ void StageTileFp8(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok0,
                                             int count, uint8_t* stage, int64_t skip_tok = -1) {
  constexpr int kVecs = D / 16;  // 16-byte pieces per row
  static_assert(kTileTok == 64 && (kTileTok * kVecs) % kThreads == 0, "every thread copies as many pieces");
  const int lane = static_cast<int>(threadIdx.x % 32);
  int64_t src[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = half * 32 + lane;
    src[half] = j < count ? CacheRowOffset(a, table, kh, tok0 + j, D) : 0;
  }
  uint8_t* vs = stage + kTileTok * Fp8KRow(D);
#pragma unroll
  for (int e = static_cast<int>(threadIdx.x); e < kTileTok * kVecs; e += kThreads) {
    const int j = e / kVecs, c = (e - j * kVecs) * 16;
    const int64_t lo = __shfl_sync(0xFFFFFFFFu, src[0], j % 32), hi = __shfl_sync(0xFFFFFFFFu, src[1], j % 32);
    const int64_t at = (j < 32 ? lo : hi) + c;
    if (tok0 + j == skip_tok) continue;
    CpAsync16(stage + j * Fp8KRow(D) + c, static_cast<const uint8_t*>(a.key_cache) + at, j < count);
    CpAsync16(vs + j * Fp8VRow(D) + c, static_cast<const uint8_t*>(a.value_cache) + at, j < count);
  }
}

// Token tok's K and V rows (an F8E4M3 cache) into row j of a stage; the first 2 * D / 16
// threads copy one 16-byte piece each.
template <int D>
__device__ __forceinline__ void StageRowFp8(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok, int j,
                                            uint8_t* stage) {
  constexpr int kVecs = D / 16;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid >= 2 * kVecs) return;
  const bool value = tid >= kVecs;
  const int c = (tid - (value ? kVecs : 0)) * 16;
  const int64_t at = CacheRowOffset(a, table, kh, tok, D) + c;
  uint8_t* dst = value ? stage + kTileTok * Fp8KRow(D) + j * Fp8VRow(D) + c : stage + j * Fp8KRow(D) + c;
  CpAsync16(dst, static_cast<const uint8_t*>(value ? a.value_cache : a.key_cache) + at, true);
}

}  // namespace vt::cuda
