// Internal to the tensor-core decode attention (attention_decode_mma.cu and its two forms,
// DecodeMmaRows there and DecodeMmaRowsN in attention_decode_heads_n.cuh): the CTA shape,
// the staged F8E4M3 tile layout and the F16 fragment helpers both forms use.
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/attention_split.cuh"
#include "vt/cuda/attention_tile.cuh"
#include "vt/cuda/device_util.cuh"
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
// Called by all kThreads threads (the pattern of StageTile, tid as there).
template <int D, int kThreads>
__device__ __forceinline__ void StageTileFp8(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok0,
                                             int count, uint8_t* stage, int64_t skip_tok = -1, int tid = -1) {
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
  for (int e = tid >= 0 ? tid : static_cast<int>(threadIdx.x); e < kTileTok * kVecs; e += kThreads) {
    const int j = e / kVecs, c = (e - j * kVecs) * 16;
    const int64_t lo = __shfl_sync(0xFFFFFFFFu, src[0], j % 32), hi = __shfl_sync(0xFFFFFFFFu, src[1], j % 32);
    const int64_t at = (j < 32 ? lo : hi) + c;
    if (tok0 + j == skip_tok) continue;
    CpAsync16(stage + j * Fp8KRow(D) + c, static_cast<const uint8_t*>(a.key_cache) + at, j < count);
    CpAsync16(vs + j * Fp8VRow(D) + c, static_cast<const uint8_t*>(a.value_cache) + at, j < count);
  }
}

// Token tok's K and V rows (an F8E4M3 cache) into row j of a stage; the first 2 * D / 16
// threads (of the CTA, or of a team: tid as StageTile's) copy one 16-byte piece each.
template <int D>
__device__ __forceinline__ void StageRowFp8(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok, int j,
                                            uint8_t* stage, int tid = -1) {
  constexpr int kVecs = D / 16;
  if (tid < 0) tid = static_cast<int>(threadIdx.x);
  if (tid >= 2 * kVecs) return;
  const bool value = tid >= kVecs;
  const int c = (tid - (value ? kVecs : 0)) * 16;
  const int64_t at = CacheRowOffset(a, table, kh, tok, D) + c;
  uint8_t* dst = value ? stage + kTileTok * Fp8KRow(D) + j * Fp8VRow(D) + c : stage + j * Fp8KRow(D) + c;
  CpAsync16(dst, static_cast<const uint8_t*>(value ? a.value_cache : a.key_cache) + at, true);
}

// A CTA's share of one sequence: its tokens [tok_begin, tok_end), whether it leaves partials,
// the block table. Filled by DecodeMmaSetup.
struct DecodeMmaWork {
  AttnSeq seq;
  int64_t tok_begin = 0, tok_end = 0;
  bool partials = false;
  const int32_t* table = nullptr;
};

// The per-sequence prelude both forms share: metadata, this split's token range, the block
// table check. False when the CTA has nothing to do (uniform across the CTA).
__device__ __forceinline__ bool DecodeMmaSetup(const AttnArgs& a, int* bad_block, DecodeMmaWork& w) {
  const int64_t s = blockIdx.x, kh = blockIdx.y, split = blockIdx.z;
  if (!ReadAttnSeq(a, s, kh == 0 && split == 0 && threadIdx.x == 0, w.seq)) return false;
  const int64_t n = w.seq.n, ctx = w.seq.ctx;
  if (n == 0 || (a.mixed && n != 1)) return false;  // a mixed step's other rows are the prefill kernel's
  if (SkippedEmptySplit(a, ctx, split, kSpan)) return false;
  w.tok_begin = 0;
  w.tok_end = ctx;
  w.partials = a.num_splits > 1 && !OneSplitHoldsAll(a, ctx, kSpan);
  if (a.num_splits > 1) {
    const int64_t chunk = DecodeSplitChunk(a, ctx, kSpan);
    w.tok_begin = split * chunk;
    w.tok_end = min(w.tok_end, w.tok_begin + chunk);
  }
  if (!CheckAttnBlocks(a, s, w.tok_begin, w.tok_end, bad_block)) return false;  // uniform
  w.table = a.block_tables + s * a.max_blocks;
  return true;
}

// Bytes of one stage buffer (a tile of K and V rows).
template <int D, bool kFp8>
constexpr int DecodeStageBytes() {
  return kFp8 ? Fp8StageBytes(D) : 2 * kTileTok * TileRow(D) * 2;
}

// Tokens [tok0, tok0 + count) into stage buffer b, skipping token skip (StageTile /
// StageTileFp8), by the kWarps * 32 threads of the CTA or of a team (tid as StageTile's).
template <int D, bool kFp8>
__device__ __forceinline__ void DecodeStageTile(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok0,
                                                int count, uint8_t* staged, int b, int64_t skip, int tid = -1) {
  uint8_t* stage = staged + b * DecodeStageBytes<D, kFp8>();
  if constexpr (kFp8) {
    StageTileFp8<D, kWarps * 32>(a, table, kh, tok0, count, stage, skip, tid);
  } else {
    StageTile<D, false, kWarps * 32>(a, table, kh, tok0, count, reinterpret_cast<uint16_t*>(stage), skip, tid);
  }
}

// Token tok's row into row j of stage buffer 0 (StageRow / StageRowFp8).
template <int D, bool kFp8>
__device__ __forceinline__ void DecodeStageRow(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok, int j,
                                               uint8_t* staged, int tid = -1) {
  if constexpr (kFp8) {
    StageRowFp8<D>(a, table, kh, tok, j, staged, tid);
  } else {
    StageRow<D>(a, table, kh, tok, j, reinterpret_cast<uint16_t*>(staged), tid);
  }
}

// The query row t's fragments of the KV head kh's group, as the 16-row operand with rows 8..15
// zero (lane (head, quad) = (lane / 4, lane % 4); head < g holds query head kh * g + head).
// k-chunk c covers dims 16c..16c+15; kFp8: the permuted dims of attention_decode_mma.cu's
// header, the queries scaled by a power of two into F16 and that power folded into the
// returned score scale (a.scale otherwise).
template <int D, bool kFp8>
__device__ __forceinline__ float DecodeQueryFragments(const AttnArgs& a, int64_t t, int64_t kh, int g, int head,
                                                      int quad, uint32_t (&qf)[D / 16][4]) {
  if constexpr (kFp8) {
    // Lane (head, quad) holds dims [64h + 16 quad, +16) of its head for each h < D / 64.
    float qv[D / 64][16];
    float big = 0.0f;
    const uint4* qr =
        reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.query) + (t * a.Hq + kh * g + head) * D);
#pragma unroll
    for (int h = 0; h < D / 64; ++h)
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const uint4 w = head < g ? qr[(64 * h + 16 * quad) / 8 + v] : make_uint4(0, 0, 0, 0);
        const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          qv[h][8 * v + i] = Bf16ToFloat(static_cast<uint16_t>(ws[i / 2] >> (16 * (i % 2))));
          big = fmaxf(big, fabsf(qv[h][8 * v + i]));
        }
      }
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) big = fmaxf(big, __shfl_xor_sync(0xFFFFFFFFu, big, off));
    int ex = 0;
    if (big > 0.0f && big <= 3.0e38f) frexpf(big, &ex);  // big = f 2^ex, f in [0.5, 1)
    const float mul = ldexpf(1.0f, -ex);
#pragma unroll
    for (int h = 0; h < D / 64; ++h)
#pragma unroll
      for (int c4 = 0; c4 < 4; ++c4) {
        const float* x = &qv[h][4 * c4];
        qf[4 * h + c4][0] = PackF16(x[0] * mul, x[1] * mul);
        qf[4 * h + c4][1] = 0u;
        qf[4 * h + c4][2] = PackF16(x[2] * mul, x[3] * mul);
        qf[4 * h + c4][3] = 0u;
      }
    return a.scale * a.k_scale * ldexpf(1.0f, ex);
  } else {
    const uint32_t* qr =
        reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(a.query) + (t * a.Hq + kh * g + head) * D);
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      const int w = c * 8 + quad;
      qf[c][0] = head < g ? qr[w] : 0u;
      qf[c][1] = 0u;
      qf[c][2] = head < g ? qr[w + 4] : 0u;
      qf[c][3] = 0u;
    }
    return a.scale;
  }
}

// Merges the kAll warps' (max, sum, accumulator) triples for query row t (red_ml [kAll]
// [kMaxGroup][2], red_acc [kAll][kMaxGroup][D] in natural dim order, written by the caller
// and synchronised), run by the CTA's kAll * 32 threads: weights e^(m_w - M), a warp that
// saw no token has m = -inf; then the output rounded once to BF16, or this split's partial.
template <int D, bool kFp8, int kAll = kWarps>
__device__ __forceinline__ void DecodeMergeWarps(const AttnArgs& a, const float* red_acc, const float* red_ml, int g,
                                                 int64_t t, int64_t kh, bool partials) {
  const int64_t split = blockIdx.z;
  for (int e = static_cast<int>(threadIdx.x); e < g * D; e += kAll * 32) {
    const int h = e / D, d = e - h * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAll; ++w) M = fmaxf(M, red_ml[(w * kMaxGroup + h) * 2]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kAll; ++w) {
      const float mw = red_ml[(w * kMaxGroup + h) * 2];
      const float wt = mw == -INFINITY ? 0.0f : expf(mw - M);
      L += red_ml[(w * kMaxGroup + h) * 2 + 1] * wt;
      O += red_acc[(w * kMaxGroup + h) * D + d] * wt;
    }
    if constexpr (kFp8) O *= a.v_scale;
    const int64_t unit = t * a.Hq + kh * g + h;
    if (partials) {  // a split past the row's position leaves (-inf, 0, 0)
      const int64_t at = split * a.T * a.Hq + unit;
      if (d == 0) {
        a.part_ml[2 * at] = M;
        a.part_ml[2 * at + 1] = L;
      }
      a.part_acc[at * D + d] = O;
    } else if (a.num_splits > 1) {
      StoreAttnOut<Bf16>(a, unit * D + d, OneSplitOut(O, L));
    } else {
      StoreAttnOut<Bf16>(a, unit * D + d, O / L);
    }
  }
}

}  // namespace vt::cuda
