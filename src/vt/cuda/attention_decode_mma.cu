// CUDA PagedAttention for decode steps on tensor cores: BF16 queries over a BF16 or an
// F8E4M3 cache, one query row per sequence, over the grid (sequence, KV head, split) as the
// CUDA-core decode kernel (attention_decode.cu).
//
// The query heads of one KV head are the rows of a 16-row mma.sync operand (rows past the
// group are zero), so every K and V element staged is used by all of them. Tiles of
// kTileTok cached tokens are staged in shared memory two at a time by cp.async
// (attention_tile.cuh); warp w takes
// tokens [16w, 16w + 16) of each tile: S = Q K^T (K fragments by ldmatrix), scaled and
// masked past the row's position, online softmax in f32 per head, O += P_hi V + P_lo V (P
// split in two BF16 terms, SplitP; V fragments by ldmatrix.trans). At the end the warps'
// (max, sum, accumulator) triples are merged through shared memory and rounded once to
// BF16, or left as a split's partial (combined as by the CUDA-core kernel). A sequence with
// n != 1 rows (possible only if another one has none, as T == S) is served row by row.
// Metadata is checked on the device as by the other kernels (attention_seq.cuh). Launched
// right after the QK-norm/RoPE/cache-write prelude that wrote the cache (AttnArgs::
// early_context), a one-row sequence's metadata, block table and first tile but the newest
// token are read before griddepcontrol.wait: everything but the queries and the step's tokens
// was complete before the prelude let this kernel start.
//
// An F8E4M3 cache (kFp8) is staged as stored (half the bytes of BF16 rows) and widened in the
// fragments, e4m3 pairs to f16 pairs by the hardware conversion (exact), for F16 products:
// - S: the K dimension of each 16-wide chunk is permuted the same way in the query and key
//   fragments, so that a lane's key bytes are contiguous (four of them give its two pairs);
//   the queries are multiplied by a power of two that brings the largest |q| of the CTA into
//   [0.5, 1) and widened to F16 (exact for every value down to 2^-17 of the largest; smaller
//   ones lose low bits in F16's subnormals), the power of two and k_scale folded into the
//   score scale;
// - O: output dim 8j + n of the natural layout becomes (D / 8) n + j, so that a lane's value
//   bytes of a token are contiguous; the byte pairs of two tokens are interleaved by prmt
//   before the conversion, and the merge writes each dim where it belongs; v_scale
//   multiplies the result (as in the CUDA-core kernel); P is split in two F16 terms.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_decode_heads_n.cuh"
#include "vt/cuda/attention_decode_mma.cuh"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/attention_split.cuh"
#include "vt/cuda/attention_tile.cuh"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/mma_sm80.cuh"

namespace vt::cuda {

namespace {

std::atomic<int64_t> g_launches{0}, g_early_launches{0}, g_fp8_launches{0}, g_heads_n_launches{0}, g_wide_launches{0};

// One warp's 16 tokens [wt0, wt0 + 16) of a staged tile (the M form, attention_decode_mma.cu's
// header): S = Q K^T for the lane's operand row, masked past end, the online softmax update
// of (m, l) and O += P V. Called only when wt0 < end (warp-uniform).
template <int D, bool kFp8>
__device__ __forceinline__ void DecodeMmaWarpTokens(const uint8_t* stage, int warp, int lane, int64_t wt0,
                                                    int64_t end, const uint32_t (&qf)[D / 16][4], float score_scale,
                                                    float (&o)[D / 8][4], float& m, float& l) {
  constexpr int kLd = TileRow(D);
  const int head = lane / 4, quad = lane % 4;
  // S for tokens wt0 + 8u + 2(lane%4) + {0,1}: sc[u][0..1] (rows 8..15 in [2..3] unused).
  float sc[2][4];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    sc[u][0] = sc[u][1] = sc[u][2] = sc[u][3] = 0.0f;
    if constexpr (kFp8) {
      // Token warp * 16 + 8u + head's bytes [64h + 16 quad, +16): chunk 4h + c4 takes
      // bytes 4 c4 .. 4 c4 + 3, the pairs of its logical k = 2 quad and 2 quad + 8.
      const uint8_t* kr = stage + (warp * 16 + u * 8 + head) * Fp8KRow(D) + 16 * quad;
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
        const uint4 kw = *reinterpret_cast<const uint4*>(kr + 64 * h);
        const uint32_t ws[4] = {kw.x, kw.y, kw.z, kw.w};
#pragma unroll
        for (int c4 = 0; c4 < 4; ++c4)
          MmaF16(sc[u], qf[4 * h + c4], Fp8PairToF16x2(ws[c4]), Fp8PairToF16x2(ws[c4] >> 16));
      }
    } else {
      const uint16_t* kr = reinterpret_cast<const uint16_t*>(stage) + (warp * 16 + u * 8 + lane % 8) * kLd +
                           (lane / 8) * 8;
#pragma unroll
      for (int c = 0; c < D / 16; c += 2) {
        uint32_t b[4];
        LdMatrixX4(b, kr + c * 16);
        Mma(sc[u], qf[c], b[0], b[1]);
        Mma(sc[u], qf[c + 1], b[2], b[3]);
      }
    }
  }
  float mx = -INFINITY;
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int64_t tok = wt0 + u * 8 + 2 * quad + v;
      sc[u][v] = tok < end ? sc[u][v] * score_scale : -INFINITY;
      mx = fmaxf(mx, sc[u][v]);
    }
  mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
  const float mn = fmaxf(m, mx);  // finite: token wt0 < end is visible
  const float res = expf(m - mn);  // 0 on the warp's first visible tile
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      sc[u][v] = sc[u][v] == -INFINITY ? 0.0f : expf(sc[u][v] - mn);
      sum += sc[u][v];
    }
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
  l = l * res + sum;
  m = mn;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    o[j][0] *= res;
    o[j][1] *= res;
  }
  uint32_t pa[4] = {0u, 0u, 0u, 0u}, pl[4] = {0u, 0u, 0u, 0u};  // P = hi + lo (SplitP)
  if constexpr (kFp8) {
    SplitPF16(sc[0][0], sc[0][1], pa[0], pl[0]);
    SplitPF16(sc[1][0], sc[1][1], pa[2], pl[2]);
    // Tokens 2 quad, +1, +8, +9 of the warp's 16, bytes [(D / 8) head, +D / 8): dim
    // (D / 8) head + j is column head of n-block j.
    constexpr int kW = D / 32;  // 32-bit words per lane and token
    const uint8_t* vr = stage + kTileTok * Fp8KRow(D) + (warp * 16 + 2 * quad) * Fp8VRow(D) + (D / 8) * head;
    uint32_t v[4][kW];  // tokens 2 quad, 2 quad + 1, 2 quad + 8, 2 quad + 9
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint8_t* row = vr + ((i / 2) * 8 + i % 2) * Fp8VRow(D);
      if constexpr (kW == 4) {
        const uint4 w = *reinterpret_cast<const uint4*>(row);
        v[i][0] = w.x;
        v[i][1] = w.y;
        v[i][2] = w.z;
        v[i][3] = w.w;
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(row);
        v[i][0] = w.x;
        v[i][1] = w.y;
      }
    }
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      // Byte b of word w is n-block 4w + b: pairs (token 2 quad, 2 quad + 1) and (+8, +9).
      const uint32_t lo01 = __byte_perm(v[0][w], v[1][w], 0x5140), lo23 = __byte_perm(v[0][w], v[1][w], 0x7362);
      const uint32_t hi01 = __byte_perm(v[2][w], v[3][w], 0x5140), hi23 = __byte_perm(v[2][w], v[3][w], 0x7362);
      const uint32_t b0[4] = {lo01, lo01 >> 16, lo23, lo23 >> 16};
      const uint32_t b1[4] = {hi01, hi01 >> 16, hi23, hi23 >> 16};
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const uint32_t x0 = Fp8PairToF16x2(b0[b]), x1 = Fp8PairToF16x2(b1[b]);
        MmaF16(o[4 * w + b], pa, x0, x1);
        MmaF16(o[4 * w + b], pl, x0, x1);
      }
    }
  } else {
    SplitP(sc[0][0], sc[0][1], pa[0], pl[0]);
    SplitP(sc[1][0], sc[1][1], pa[2], pl[2]);
    const uint16_t* vr = reinterpret_cast<const uint16_t*>(stage) + kTileTok * kLd + warp * 16 * kLd +
                         ((lane / 8) % 2 * 8 + lane % 8) * kLd + (lane / 16) * 8;
    AccumulatePV<D>(o, pa, pl, vr);
  }
}

// Warp w's (max, sum, accumulator) for its lane's head into the merge buffers (layouts of
// DecodeMergeWarps). Lane l holds head l / 4's dims 8j + 2(l % 4) + {0, 1} (kFp8: (D / 8)
// (2(l % 4) + {0, 1}) + j).
template <int D, bool kFp8>
__device__ __forceinline__ void DecodeMmaStoreWarp(float* red_acc, float* red_ml, int warp, int lane, int g,
                                                   const float (&o)[D / 8][4], float m, float l) {
  const int head = lane / 4, quad = lane % 4;
  if (head < g) {
    if (quad == 0) {
      red_ml[(warp * kMaxGroup + head) * 2] = m;
      red_ml[(warp * kMaxGroup + head) * 2 + 1] = l;
    }
    float* acc = red_acc + (warp * kMaxGroup + head) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      if constexpr (kFp8) {
        acc[(D / 8) * (2 * quad) + j] = o[j][0];
        acc[(D / 8) * (2 * quad + 1) + j] = o[j][1];
      } else {
        acc[8 * j + 2 * quad] = o[j][0];
        acc[8 * j + 2 * quad + 1] = o[j][1];
      }
    }
  }
}

// The kernel's work before its splits are combined; every return is uniform across the CTA.
// kEarly (AttnArgs::early_context): the sequence's metadata, block table and, for a sequence
// of one row, its first tile but the newest token are read before griddepcontrol.wait,
// which this function then runs; the newest token's row is staged after it.
template <int D, bool kEarly, bool kFp8>
__device__ __forceinline__ void DecodeMmaRows(const AttnArgs& a) {
  constexpr int kLd = TileRow(D);
  constexpr int kStage = DecodeStageBytes<D, kFp8>();
  extern __shared__ __align__(16) uint8_t staged[];
  // The merge reuses the staged tiles' memory once every tile is consumed.
  static_assert(kWarps * kMaxGroup * (D + 2) * sizeof(float) <= StagedBytes(D, kFp8), "merge buffers fit");
  float* red_acc = reinterpret_cast<float*>(staged);             // [kWarps][kMaxGroup][D]
  float* red_ml = red_acc + kWarps * kMaxGroup * D;              // [kWarps][kMaxGroup][2]
  __shared__ int bad_block;
  const int64_t kh = blockIdx.y;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  DecodeMmaWork work;
  if (!DecodeMmaSetup(a, &bad_block, work)) return;
  const int64_t n = work.seq.n, ctx = work.seq.ctx, tok_begin = work.tok_begin, tok_end = work.tok_end;
  const int32_t* table = work.table;
  const int g = static_cast<int>(a.group);
  const int head = lane / 4;  // this lane's operand row: query head kh * g + head when head < g
  const int quad = lane % 4;
  auto stage_tile = [&](int64_t tok0, int count, int b, int64_t skip) {
    DecodeStageTile<D, kFp8>(a, table, kh, tok0, count, staged, b, skip);
  };
  // One row (n == 1): it sees tokens [tok_begin, tok_end), the newest (ctx - 1, written by the
  // prelude) staged after the wait.
  const bool early = kEarly && n == 1 && tok_end > tok_begin;
  if (early) {
    stage_tile(tok_begin, static_cast<int>(min(int64_t{kTileTok}, tok_end - tok_begin)), 0, ctx - 1);
    CpAsyncCommit();
  }
  if constexpr (kEarly) PdlWait();

  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = work.seq.q0 + r, pos = ctx - n + r;
    const int64_t end = min(tok_end, pos + 1);  // this row sees tokens 0..pos
    uint32_t qf[D / 16][4];
    const float score_scale = DecodeQueryFragments<D, kFp8>(a, t, kh, g, head, quad, qf);
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t tiles = end > tok_begin ? (end - tok_begin + kTileTok - 1) / kTileTok : 0;
    __syncthreads();  // the previous row's merge buffers (the stages) are consumed
    if (early) {
      if (ctx - 1 < tok_begin + kTileTok) {
        const int j = static_cast<int>(ctx - 1 - tok_begin);
        DecodeStageRow<D, kFp8>(a, table, kh, ctx - 1, j, staged);
      }
    } else if (tiles > 0) {
      stage_tile(tok_begin, static_cast<int>(min(int64_t{kTileTok}, end - tok_begin)), 0, -1);
    }
    CpAsyncCommit();
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t tok0 = tok_begin + tile * kTileTok;
      if (tile + 1 < tiles) {
        const int64_t next0 = tok0 + kTileTok;
        stage_tile(next0, static_cast<int>(min(int64_t{kTileTok}, end - next0)), static_cast<int>((tile + 1) % 2), -1);
      }
      CpAsyncCommit();
      CpAsyncWait<1>();
      __syncthreads();
      const uint8_t* stage = staged + (tile % 2) * kStage;
      const int64_t wt0 = tok0 + warp * 16;
      if (wt0 < end)  // warp-uniform
        DecodeMmaWarpTokens<D, kFp8>(stage, warp, lane, wt0, end, qf, score_scale, o, m, l);
      __syncthreads();  // this stage is consumed before it is refilled
    }
    // Merge the warps: weights e^(m_w - M); a warp that saw no token has m = -inf. Lane l
    // holds head l / 4's dims 8j + 2(l % 4) + {0, 1} (kFp8: (D / 8)(2(l % 4) + {0, 1}) + j).
    DecodeMmaStoreWarp<D, kFp8>(red_acc, red_ml, warp, lane, g, o, m, l);
    __syncthreads();
    DecodeMergeWarps<D, kFp8>(a, red_acc, red_ml, g, t, kh, work.partials);
  }
}

// The wide form (LaunchDecodeMma says when): kTeams teams of kWarps warps in one CTA, team i
// taking the CTA's tiles i, i + kTeams, ... into a stage of its own, so that the tiles of a
// short context are taken at once instead of one after another by four warps (the cost of
// a batch-1 step's attention is that chain, not its bytes). Each team stages a tile, waits
// for it on its own named barrier and runs the M form's per-warp tokens
// (DecodeMmaWarpTokens); the merge spans every warp of the CTA. With early reads each team
// stages its first tile before griddepcontrol.wait (the newest token after it).
template <int D, bool kEarly, bool kFp8, int kTeams>
__device__ __forceinline__ void DecodeMmaRowsWide(const AttnArgs& a) {
  constexpr int kStage = DecodeStageBytes<D, kFp8>();
  constexpr int kTeamThreads = kWarps * 32;
  constexpr int kAll = kWarps * kTeams;
  extern __shared__ __align__(16) uint8_t staged[];
  // The merge reuses the teams' stages once every tile is consumed.
  static_assert(kAll * kMaxGroup * (D + 2) * sizeof(float) <= size_t{kTeams} * kStage, "merge buffers fit");
  float* red_acc = reinterpret_cast<float*>(staged);  // [kAll][kMaxGroup][D]
  float* red_ml = red_acc + kAll * kMaxGroup * D;     // [kAll][kMaxGroup][2]
  __shared__ int bad_block;
  const int64_t kh = blockIdx.y;
  const int all_warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int team = all_warp / kWarps, warp = all_warp % kWarps;
  const int team_tid = static_cast<int>(threadIdx.x) % kTeamThreads;
  DecodeMmaWork work;
  if (!DecodeMmaSetup(a, &bad_block, work)) return;
  const int64_t n = work.seq.n, ctx = work.seq.ctx, tok_begin = work.tok_begin, tok_end = work.tok_end;
  const int32_t* table = work.table;
  const int g = static_cast<int>(a.group);
  const int head = lane / 4, quad = lane % 4;
  uint8_t* stage = staged + team * kStage;
  auto team_sync = [&] { asm volatile("bar.sync %0, %1;\n" ::"r"(team + 1), "n"(kTeamThreads) : "memory"); };
  auto stage_tile = [&](int64_t tok0, int64_t last, int64_t skip) {
    DecodeStageTile<D, kFp8>(a, table, kh, tok0, static_cast<int>(min(int64_t{kTileTok}, last - tok0)), stage, 0, skip,
                             team_tid);
  };
  // One row (n == 1): it sees tokens [tok_begin, tok_end); team i's first tile is tile i.
  const bool early = kEarly && n == 1 && tok_end > tok_begin;
  const int64_t first0 = tok_begin + int64_t{team} * kTileTok;
  if (early && first0 < tok_end) {
    stage_tile(first0, tok_end, ctx - 1);
    CpAsyncCommit();
  }
  if constexpr (kEarly) PdlWait();

  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = work.seq.q0 + r, pos = ctx - n + r;
    const int64_t end = min(tok_end, pos + 1);  // this row sees tokens 0..pos
    uint32_t qf[D / 16][4];
    const float score_scale = DecodeQueryFragments<D, kFp8>(a, t, kh, g, head, quad, qf);
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t tiles = end > tok_begin ? (end - tok_begin + kTileTok - 1) / kTileTok : 0;
    __syncthreads();  // the previous row's merge buffers (the stages) are consumed
    for (int64_t tile = team; tile < tiles; tile += kTeams) {
      const int64_t tok0 = tok_begin + tile * kTileTok;
      if (early && tile == team) {  // staged before the wait but the newest token
        if (ctx - 1 >= tok0 && ctx - 1 < tok0 + kTileTok)
          DecodeStageRow<D, kFp8>(a, table, kh, ctx - 1, static_cast<int>(ctx - 1 - tok0), stage, team_tid);
      } else {
        stage_tile(tok0, end, -1);
      }
      CpAsyncCommit();
      CpAsyncWait<0>();
      team_sync();
      const int64_t wt0 = tok0 + warp * 16;
      if (wt0 < end)  // warp-uniform
        DecodeMmaWarpTokens<D, kFp8>(stage, warp, lane, wt0, end, qf, score_scale, o, m, l);
      team_sync();  // this stage is consumed before it is refilled
    }
    __syncthreads();  // every team's stage is consumed: the merge buffers overlay them
    DecodeMmaStoreWarp<D, kFp8>(red_acc, red_ml, all_warp, lane, g, o, m, l);
    __syncthreads();
    DecodeMergeWarps<D, kFp8, kAll>(a, red_acc, red_ml, g, t, kh, work.partials);
  }
}

template <int D, bool kEarly, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32 * kWideTeams, 1) DecodeMmaWideKernel(AttnArgs a) {
  if constexpr (!kEarly) PdlWait();
  DecodeMmaRowsWide<D, kEarly, kFp8, kWideTeams>(a);
  if constexpr (kEarly) PdlWait();  // for a CTA that returned before its rows' wait (returns at once otherwise)
  CombineSplitsInLastCta<Bf16>(a, kSpan);
}

// An F8E4M3 cache's kernels are held to 168 registers, three CTAs per SM.
template <int D, bool kEarly, bool kFp8, bool kHeadsN>
__global__ void __launch_bounds__(kWarps * 32, kFp8 ? 3 : 1) DecodeMmaKernel(AttnArgs a) {
  if constexpr (!kEarly) PdlWait();
  if constexpr (kHeadsN) {
    DecodeMmaRowsN<D, kEarly, kFp8>(a);
  } else {
    DecodeMmaRows<D, kEarly, kFp8>(a);
  }
  if constexpr (kEarly) PdlWait();  // for a CTA that returned before its rows' wait (returns at once otherwise)
  CombineSplitsInLastCta<Bf16>(a, kSpan);
}

// VT_CUDA_ATTN_DECODE_MMA=0 keeps decode steps on the CUDA-core kernel (A/B runs, tests);
// VT_CUDA_ATTN_DECODE_MMA_FP8=0 keeps only F8E4M3 caches there. Read at each call.
bool DecodeMmaOn() {
  return SwitchOn("VT_CUDA_ATTN_DECODE_MMA");
}

bool DecodeMmaGeometry(const AttnArgs& a) {
  return (a.D == 64 || a.D == 128) && a.group >= 1 && a.group <= kMaxGroup && a.vec16;
}

template <bool kEarly, bool kFp8>
auto DecodeMmaKernelFor(int64_t D, bool heads_n) {
  return heads_n ? (D == 64 ? DecodeMmaKernel<64, kEarly, kFp8, true> : DecodeMmaKernel<128, kEarly, kFp8, true>)
                 : (D == 64 ? DecodeMmaKernel<64, kEarly, kFp8, false> : DecodeMmaKernel<128, kEarly, kFp8, false>);
}

template <bool kEarly, bool kFp8>
auto DecodeMmaWideKernelFor(int64_t D) {
  return D == 64 ? DecodeMmaWideKernel<64, kEarly, kFp8> : DecodeMmaWideKernel<128, kEarly, kFp8>;
}

}  // namespace

bool DecodeMmaFp8Takes(const AttnArgs& a, DType query, DType cache) {
  return query == DType::kBF16 && cache == DType::kF8E4M3 && DecodeMmaOn() && SwitchOn("VT_CUDA_ATTN_DECODE_MMA_FP8") &&
         DecodeMmaGeometry(a);
}

bool DecodeMmaTakes(const AttnArgs& a, DType query, DType cache) {
  if (query != DType::kBF16 || cache != DType::kBF16 || !DecodeMmaOn()) return false;
  return DecodeMmaGeometry(a);
}

// The query heads as the N columns of the products (attention_decode_heads_n.cuh) over an
// F8E4M3 cache, as the M rows (DecodeMmaRows) over a BF16 one: each measured the faster for
// its cache in the four-warp form (bench/README.md); a step the wide form takes runs the M
// rows for both caches. VT_CUDA_ATTN_DECODE_HEADS_N=1 takes the N form for both (and never
// the wide form), =0 the M form for both. Read at each call.
namespace {
const char* HeadsNSwitch() { return std::getenv("VT_CUDA_ATTN_DECODE_HEADS_N"); }
bool HeadsNForced() {
  const char* v = HeadsNSwitch();
  return v != nullptr && std::strcmp(v, "0") != 0;
}
bool DecodeHeadsN(bool fp8) { return HeadsNSwitch() == nullptr ? fp8 : HeadsNForced(); }
}  // namespace

namespace {

// The wide form's dynamic shared memory: a stage per team (104 KB for a BF16 cache at head
// size 128: more than sm_86/sm_89 let a CTA opt in to, so those GPUs keep the four-warp form).
size_t DecodeMmaWideSmemBytes(int64_t D, bool fp8) {
  const int stage = D == 64 ? (fp8 ? DecodeStageBytes<64, true>() : DecodeStageBytes<64, false>())
                            : (fp8 ? DecodeStageBytes<128, true>() : DecodeStageBytes<128, false>());
  return size_t{kWideTeams} * static_cast<size_t>(stage);
}

}  // namespace

bool DecodeMmaWide(const CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  const bool fp8 = DecodeMmaFp8Takes(a, query, cache);
  if (cq.cc_major < 8 || !(fp8 || DecodeMmaTakes(a, query, cache)) || HeadsNForced()) return false;
  if (DecodeMmaWideSmemBytes(a.D, fp8) > cq.smem_per_block_optin) return false;
  const char* v = std::getenv("VT_CUDA_ATTN_DECODE_WIDE");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  if (v != nullptr && std::strcmp(v, "always") == 0) return true;
  return a.S * a.Hk * 4 <= cq.sm_count;
}

bool LaunchDecodeMma(CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  const bool fp8 = DecodeMmaFp8Takes(a, query, cache);
  if (cq.cc_major < 8 || !(fp8 || DecodeMmaTakes(a, query, cache))) return false;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (fp8) g_fp8_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.early_context) g_early_launches.fetch_add(1, std::memory_order_relaxed);
  const dim3 grid(static_cast<unsigned>(a.S), static_cast<unsigned>(a.Hk), static_cast<unsigned>(a.num_splits));
  if (a.wide) {
    g_wide_launches.fetch_add(1, std::memory_order_relaxed);
    const auto kernel = fp8 ? (a.early_context ? DecodeMmaWideKernelFor<true, true>(a.D)
                                               : DecodeMmaWideKernelFor<false, true>(a.D))
                            : (a.early_context ? DecodeMmaWideKernelFor<true, false>(a.D)
                                               : DecodeMmaWideKernelFor<false, false>(a.D));
    const size_t smem = DecodeMmaWideSmemBytes(a.D, fp8);
    VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    LaunchOverlapped(cq, "DecodeMmaWideKernel", kernel, grid, kWarps * 32 * kWideTeams, smem, a);
    return true;
  }
  const bool heads_n = DecodeHeadsN(fp8);
  if (heads_n) g_heads_n_launches.fetch_add(1, std::memory_order_relaxed);
  const auto kernel = fp8 ? (a.early_context ? DecodeMmaKernelFor<true, true>(a.D, heads_n)
                                             : DecodeMmaKernelFor<false, true>(a.D, heads_n))
                          : (a.early_context ? DecodeMmaKernelFor<true, false>(a.D, heads_n)
                                             : DecodeMmaKernelFor<false, false>(a.D, heads_n));
  const size_t smem = StagedBytes(static_cast<int>(a.D), fp8);
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  LaunchOverlapped(cq, "DecodeMmaKernel", kernel, grid, kWarps * 32, smem, a);
  return true;
}

int64_t DecodeMmaLaunches() { return g_launches.load(std::memory_order_relaxed); }

int64_t DecodeMmaLaunchesReadingEarly() { return g_early_launches.load(std::memory_order_relaxed); }

int64_t DecodeMmaFp8Launches() { return g_fp8_launches.load(std::memory_order_relaxed); }

int64_t DecodeMmaHeadsNLaunches() { return g_heads_n_launches.load(std::memory_order_relaxed); }

int64_t DecodeMmaWideLaunches() { return g_wide_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
