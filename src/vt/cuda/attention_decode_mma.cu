// CUDA PagedAttention for decode steps on tensor cores: BF16 queries over a BF16 cache, one
// query row per sequence, over the grid (sequence, KV head, split) as the
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
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/attention_split.cuh"
#include "vt/cuda/attention_tile.cuh"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/mma_sm80.cuh"

namespace vt::cuda {

namespace {

constexpr int kWarps = 4;             // each takes 16 tokens of a tile
constexpr int kMaxGroup = 8;          // query heads per KV head: rows 0..7 of the operand
constexpr int kSpan = kTileTok;       // a split's tokens are whole tiles

std::atomic<int64_t> g_launches{0}, g_early_launches{0};

// The kernel's work before its splits are combined; every return is uniform across the CTA.
// kEarly (AttnArgs::early_context): the sequence's metadata, block table and, for a sequence
// of one row, its first tile but the newest token are read before griddepcontrol.wait,
// which this function then runs; the newest token's row is staged after it.
template <int D, bool kEarly>
__device__ __forceinline__ void DecodeMmaRows(const AttnArgs& a) {
  constexpr int kLd = TileRow(D);
  constexpr int kStage = 2 * kTileTok * kLd;
  extern __shared__ __align__(16) uint16_t staged[];
  // The merge reuses the staged tiles' memory once every tile is consumed.
  static_assert(kWarps * kMaxGroup * (D + 2) * sizeof(float) <= TwoTileSmemBytes(D), "merge buffers fit");
  float* red_acc = reinterpret_cast<float*>(staged);             // [kWarps][kMaxGroup][D]
  float* red_ml = red_acc + kWarps * kMaxGroup * D;              // [kWarps][kMaxGroup][2]
  __shared__ int bad_block;
  const int64_t s = blockIdx.x, kh = blockIdx.y, split = blockIdx.z;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  AttnSeq seq;
  if (!ReadAttnSeq(a, s, kh == 0 && split == 0 && threadIdx.x == 0, seq)) return;
  const int64_t n = seq.n, ctx = seq.ctx;
  if (n == 0 || (a.mixed && n != 1)) return;  // a mixed step's other rows are the prefill kernel's
  const int g = static_cast<int>(a.group);
  int64_t tok_begin = 0, tok_end = ctx;
  if (SkippedEmptySplit(a, ctx, split, kSpan)) return;
  const bool partials = a.num_splits > 1 && !OneSplitHoldsAll(a, ctx, kSpan);
  if (a.num_splits > 1) {
    const int64_t chunk = DecodeSplitChunk(a, ctx, kSpan);
    tok_begin = split * chunk;
    tok_end = min(tok_end, tok_begin + chunk);
  }
  if (!CheckAttnBlocks(a, s, tok_begin, tok_end, &bad_block)) return;  // uniform
  const int32_t* table = a.block_tables + s * a.max_blocks;
  const int head = lane / 4;  // this lane's operand row: query head kh * g + head when head < g
  // One row (n == 1): it sees tokens [tok_begin, tok_end), the newest (ctx - 1, written by the
  // prelude) staged after the wait.
  const bool early = kEarly && n == 1 && tok_end > tok_begin;
  if (early) {
    StageTile<D, false, kWarps * 32>(a, table, kh, tok_begin, static_cast<int>(min(int64_t{kTileTok}, tok_end - tok_begin)),
                                    staged, ctx - 1);
    CpAsyncCommit();
  }
  if constexpr (kEarly) PdlWait();

  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = seq.q0 + r, pos = ctx - n + r;
    const int64_t end = min(tok_end, pos + 1);  // this row sees tokens 0..pos
    // Q fragments: k-chunk c covers dims 16c..16c+15; rows 8..15 of the operand are zero.
    uint32_t qf[D / 16][4];
    {
      const uint32_t* qr =
          reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(a.query) + (t * a.Hq + kh * g + head) * D);
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
        const int w = c * 8 + lane % 4;
        qf[c][0] = head < g ? qr[w] : 0u;
        qf[c][1] = 0u;
        qf[c][2] = head < g ? qr[w + 4] : 0u;
        qf[c][3] = 0u;
      }
    }
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t tiles = end > tok_begin ? (end - tok_begin + kTileTok - 1) / kTileTok : 0;
    __syncthreads();  // the previous row's merge buffers (the stages) are consumed
    if (early) {
      if (ctx - 1 < tok_begin + kTileTok) StageRow<D>(a, table, kh, ctx - 1, static_cast<int>(ctx - 1 - tok_begin), staged);
    } else if (tiles > 0) {
      StageTile<D, false, kWarps * 32>(a, table, kh, tok_begin, static_cast<int>(min(int64_t{kTileTok}, end - tok_begin)),
                                      staged);
    }
    CpAsyncCommit();
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t tok0 = tok_begin + tile * kTileTok;
      if (tile + 1 < tiles) {
        const int64_t next0 = tok0 + kTileTok;
        StageTile<D, false, kWarps * 32>(a, table, kh, next0, static_cast<int>(min(int64_t{kTileTok}, end - next0)),
                                        staged + ((tile + 1) % 2) * kStage);
      }
      CpAsyncCommit();
      CpAsyncWait<1>();
      __syncthreads();
      const uint16_t* ks = staged + (tile % 2) * kStage + warp * 16 * kLd;  // this warp's 16 tokens
      const uint16_t* vs = ks + kTileTok * kLd;
      const int64_t wt0 = tok0 + warp * 16;
      if (wt0 < end) {  // warp-uniform
        // S for tokens wt0 + 8u + 2(lane%4) + {0,1}: sc[u][0..1] (rows 8..15 in [2..3] unused).
        float sc[2][4];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          sc[u][0] = sc[u][1] = sc[u][2] = sc[u][3] = 0.0f;
          const uint16_t* kr = ks + (u * 8 + lane % 8) * kLd + (lane / 8) * 8;
#pragma unroll
          for (int c = 0; c < D / 16; c += 2) {
            uint32_t b[4];
            LdMatrixX4(b, kr + c * 16);
            Mma(sc[u], qf[c], b[0], b[1]);
            Mma(sc[u], qf[c + 1], b[2], b[3]);
          }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            const int64_t tok = wt0 + u * 8 + 2 * (lane % 4) + v;
            sc[u][v] = tok < end ? sc[u][v] * a.scale : -INFINITY;
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
        SplitP(sc[0][0], sc[0][1], pa[0], pl[0]);
        SplitP(sc[1][0], sc[1][1], pa[2], pl[2]);
        const uint16_t* vr = vs + ((lane / 8) % 2 * 8 + lane % 8) * kLd + (lane / 16) * 8;
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
      __syncthreads();  // this stage is consumed before it is refilled
    }
    // Merge the warps: weights e^(m_w - M); a warp that saw no token has m = -inf. Lane l
    // holds head l / 4's dims 8j + 2(l % 4) + {0, 1}.
    if (head < g) {
      if (lane % 4 == 0) {
        red_ml[(warp * kMaxGroup + head) * 2] = m;
        red_ml[(warp * kMaxGroup + head) * 2 + 1] = l;
      }
      float* acc = red_acc + (warp * kMaxGroup + head) * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        acc[8 * j + 2 * (lane % 4)] = o[j][0];
        acc[8 * j + 2 * (lane % 4) + 1] = o[j][1];
      }
    }
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < g * D; e += kWarps * 32) {
      const int h = e / D, d = e - h * D;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, red_ml[(w * kMaxGroup + h) * 2]);
      float L = 0.0f, O = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float mw = red_ml[(w * kMaxGroup + h) * 2];
        const float wt = mw == -INFINITY ? 0.0f : expf(mw - M);
        L += red_ml[(w * kMaxGroup + h) * 2 + 1] * wt;
        O += red_acc[(w * kMaxGroup + h) * D + d] * wt;
      }
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
}

template <int D, bool kEarly>
__global__ void __launch_bounds__(kWarps * 32) DecodeMmaKernel(AttnArgs a) {
  if constexpr (!kEarly) PdlWait();
  DecodeMmaRows<D, kEarly>(a);
  if constexpr (kEarly) PdlWait();  // for a CTA that returned before its rows' wait (returns at once otherwise)
  CombineSplitsInLastCta<Bf16>(a, kSpan);
}

// VT_CUDA_ATTN_DECODE_MMA=0 keeps decode steps on the CUDA-core kernel (A/B runs, tests).
bool DecodeMmaOn() {
  return SwitchOn("VT_CUDA_ATTN_DECODE_MMA");
}

}  // namespace

bool DecodeMmaTakes(const AttnArgs& a, DType query, DType cache) {
  if (query != DType::kBF16 || cache != DType::kBF16 || !DecodeMmaOn()) return false;
  return (a.D == 64 || a.D == 128) && a.group >= 1 && a.group <= kMaxGroup && a.vec16;
}

bool LaunchDecodeMma(CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  if (cq.cc_major < 8 || !DecodeMmaTakes(a, query, cache)) return false;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.early_context) g_early_launches.fetch_add(1, std::memory_order_relaxed);
  const auto kernel = a.early_context ? (a.D == 64 ? DecodeMmaKernel<64, true> : DecodeMmaKernel<128, true>)
                                      : (a.D == 64 ? DecodeMmaKernel<64, false> : DecodeMmaKernel<128, false>);
  const size_t smem = TwoTileSmemBytes(static_cast<int>(a.D));
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(a.S), static_cast<unsigned>(a.Hk), static_cast<unsigned>(a.num_splits));
  LaunchOverlapped(cq, "DecodeMmaKernel", kernel, grid, kWarps * 32, smem, a);
  return true;
}

int64_t DecodeMmaLaunches() { return g_launches.load(std::memory_order_relaxed); }

int64_t DecodeMmaLaunchesReadingEarly() { return g_early_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
