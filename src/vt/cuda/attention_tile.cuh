// Internal to the tensor-core attention kernels (attention_prefill.cu, attention_decode.cu):
// a tile of kTileTok cached tokens of one KV head staged in shared memory as BF16 rows
// ([token][d], K rows then V rows), from a BF16 cache by cp.async or from an F8E4M3 cache
// widened through registers (every e4m3 value is exact in BF16).
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/mma_sm80.cuh"

namespace vt::cuda {

constexpr int kTileTok = 64;

constexpr int TileRow(int D) { return D + 8; }  // bf16 elements per staged row (pad: spreads banks)

// Shared memory of two staged tiles (double buffering).
constexpr size_t TwoTileSmemBytes(int D) { return size_t{2} * 2 * kTileTok * TileRow(D) * sizeof(uint16_t); }

// Eight e4m3 bytes -> eight BF16 (exact), as one 16-byte word.
__device__ __forceinline__ uint4 Fp8x8ToBf16x8(uint2 v) {
  const uint32_t w[2] = {v.x, v.y};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = Fp8x2ToFloat2(w[i / 2] >> (16 * (i % 2)));
    o[i] = PackBf16(f.x, f.y);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Tokens [tok0, tok0 + count) of KV head kh into a stage (ks: K rows, then V rows); rows
// past count are zero. Called by all kThreads threads of the CTA; thread tid copies the
// 16-byte pieces tid, tid + kThreads, ...: piece e is token e / kVecs. Lane l of each warp
// finds the cache offsets of tokens l and 32 + l once; the others take them by shuffle.
// Token skip_tok's row (BF16 caches only) is neither copied nor zeroed: StageRow fills it.
// tid: the thread's index among the kThreads (-1: threadIdx.x; a team of a CTA passes its own).
template <int D, bool kFp8, int kThreads>
__device__ __forceinline__ void StageTile(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok0,
                                          int count, uint16_t* ks, int64_t skip_tok = -1, int tid = -1) {
  static_assert(kTileTok == 64 && (kTileTok * D / 8) % kThreads == 0, "every thread copies as many pieces");
  constexpr int kLd = TileRow(D);
  constexpr int kVecs = D / 8;  // 16-byte BF16 pieces per row
  const int lane = static_cast<int>(threadIdx.x % 32);
  int64_t src[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = half * 32 + lane;
    src[half] = 0;
    if (j < count) {
      src[half] = CacheRowOffset(a, table, kh, tok0 + j, D);
    }
  }
  uint16_t* vs = ks + kTileTok * kLd;
#pragma unroll
  for (int e = tid >= 0 ? tid : static_cast<int>(threadIdx.x); e < kTileTok * kVecs; e += kThreads) {
    const int j = e / kVecs, c = (e - j * kVecs) * 8;
    const int64_t lo = __shfl_sync(0xFFFFFFFFu, src[0], j % 32), hi = __shfl_sync(0xFFFFFFFFu, src[1], j % 32);
    const int64_t at = (j < 32 ? lo : hi) + c;
    const bool valid = j < count;
    if constexpr (kFp8) {
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (valid) {
        kv = Fp8x8ToBf16x8(*reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.key_cache) + at));
        vv = Fp8x8ToBf16x8(*reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.value_cache) + at));
      }
      *reinterpret_cast<uint4*>(ks + j * kLd + c) = kv;
      *reinterpret_cast<uint4*>(vs + j * kLd + c) = vv;
    } else if (tok0 + j != skip_tok) {
      CpAsync16(ks + j * kLd + c, static_cast<const uint16_t*>(a.key_cache) + at, valid);
      CpAsync16(vs + j * kLd + c, static_cast<const uint16_t*>(a.value_cache) + at, valid);
    }
  }
}

// Token tok's K and V rows of KV head kh (a BF16 cache) into row j of a stage, by cp.async;
// the first 2 * D / 8 threads of the CTA (or of a team: tid as StageTile's) copy one
// 16-byte piece each.
template <int D>
__device__ __forceinline__ void StageRow(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok, int j,
                                         uint16_t* ks, int tid = -1) {
  constexpr int kLd = TileRow(D);
  constexpr int kVecs = D / 8;
  if (tid < 0) tid = static_cast<int>(threadIdx.x);
  if (tid >= 2 * kVecs) return;
  const bool value = tid >= kVecs;
  const int c = (tid - (value ? kVecs : 0)) * 8;
  const int64_t at = CacheRowOffset(a, table, kh, tok, D) + c;
  uint16_t* dst = (value ? ks + kTileTok * kLd : ks) + j * kLd + c;
  CpAsync16(dst, static_cast<const uint16_t*>(value ? a.value_cache : a.key_cache) + at, true);
}

// P as two BF16 terms for the A fragment of O += P V, p = hi + lo (hi = p rounded, lo = the
// rest rounded): two products keep P to about 16 bits, so its rounding does not show in the
// output (P rounded once, as FlashAttention does, missed the float64 bound by up to 1 ulp of
// the output where the weighted values cancel).
__device__ __forceinline__ void SplitP(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = PackBf16(x0, x1);
  lo = PackBf16(x0 - Bf16ToFloat(FloatToBf16(x0)), x1 - Bf16ToFloat(FloatToBf16(x1)));
}

// O += P V over 16 tokens: P as its two BF16 terms (SplitP) in A fragments pa and pl, vr
// this lane's ldmatrix.trans address in the tokens' staged V rows (row (l / 8) % 2 * 8 +
// l % 8, column (l / 16) * 8); each ldmatrix.x4.trans gives the V fragments of two 8-dim
// blocks.
template <int D>
__device__ __forceinline__ void AccumulatePV(float (&o)[D / 8][4], const uint32_t (&pa)[4], const uint32_t (&pl)[4],
                                             const uint16_t* vr) {
#pragma unroll
  for (int j = 0; j < D / 8; j += 2) {
    uint32_t b[4];
    LdMatrixX4Trans(b, vr + j * 8);
    Mma(o[j], pa, b[0], b[1]);
    Mma(o[j], pl, b[0], b[1]);
    Mma(o[j + 1], pa, b[2], b[3]);
    Mma(o[j + 1], pl, b[2], b[3]);
  }
}

}  // namespace vt::cuda
