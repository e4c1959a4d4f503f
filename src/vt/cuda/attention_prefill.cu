// CUDA PagedAttention for prefill on tensor cores (mma.sync m16n8k16, BF16 in, f32
// accumulate), in the manner of FlashAttention-2 over vLLM's paged cache.
//
// A CTA of kWarps warps serves 16 * kWarps consecutive query rows of one sequence and one
// query head; warp w owns 16 rows. Tiles of kTok cached tokens of that head's KV head are
// staged in shared memory as stored ([token][d], K and V alike; attention_tile.cuh), two
// tiles in flight: while the warps compute on one, the next is copied in by cp.async (a
// BF16 cache) or widened through registers (an F8E4M3 cache). K fragments load with
// ldmatrix, V fragments with ldmatrix.trans (the transpose the P V product needs). Per tile
// each warp computes S = Q K^T (f32), scales it, masks tokens past each row's position,
// updates its rows' running max and sum (online softmax in f32), splits P into two BF16
// terms (SplitP) and accumulates O += P_hi V + P_lo V in f32. The result is O / sum rounded
// once to BF16. An F8E4M3 cache's k_scale is folded into the score scale and its v_scale
// into the output.
// Head size 256 keeps Q in shared memory instead of registers (sm_90: two stages and Q take
// 169 KB) and loads its fragments once per tile.
// CTAs are numbered heaviest first (the causal mask gives a sequence's last rows the most
// tiles), so the short ones fill the tail of the grid.
// Metadata checks are the CUDA-core kernel's (device_error.h).
#include <atomic>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/attention_tile.cuh"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/mma_sm80.cuh"

namespace vt::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // query rows per CTA
constexpr int kTok = kTileTok;      // cached tokens per tile

std::atomic<int64_t> g_launches{0};

// Head sizes past 128 keep Q in shared memory (kQShared): its fragments and the output's
// would not fit the registers together (D = 256: 64 + 128 per thread).
template <int D>
constexpr bool QShared() {
  return D > 128;
}

template <int D, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32, QShared<D>() ? 1 : 2) PrefillMmaKernel(AttnArgs a, int64_t items) {
  PdlWait();
  constexpr bool kQShared = QShared<D>();
  constexpr int kLd = TileRow(D);
  constexpr int kStage = 2 * kTok * kLd;  // bf16 elements of a stage: K rows, then V rows
  extern __shared__ __align__(16) uint16_t staged[];
  __shared__ int bad_block;
  // Heaviest first: the last item (a sequence's last rows) takes the first CTAs, every head.
  const int64_t item = items - 1 - static_cast<int64_t>(blockIdx.x) / a.Hq;
  const int64_t h = static_cast<int64_t>(blockIdx.x) % a.Hq, kh = h / a.group;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (h == 0 && threadIdx.x == 0) ReportAttnSeq(a, item);
  int64_t s, row_block;  // the sequence, and this CTA's block of kRows rows within it
  AttnFindItem(a, item, 1, kRows, s, row_block);
  AttnSeq seq;
  if (row_block < 0 || !ReadAttnSeq(a, s, false, seq)) return;
  const int64_t q0 = seq.q0, n = seq.n, ctx = seq.ctx;
  if (a.mixed && n < 2) return;  // a mixed step's one-row sequences are the decode kernel's
  const int64_t r0 = row_block * kRows;  // first row of this CTA
  if (r0 >= n) return;            // uniform
  const int64_t first_pos = ctx - n;
  const int64_t cta_last = first_pos + min(r0 + kRows, n) - 1;  // last position any row sees
  const int32_t* table = a.block_tables + s * a.max_blocks;
  if (!CheckAttnBlocks(a, s, 0, cta_last + 1, &bad_block)) return;  // uniform

  // This thread's two rows of its warp's 16 (fragment rows lane/4 and lane/4 + 8), clamped
  // to the sequence: a row past n is computed on the last row's data and not stored.
  const int64_t wr0 = r0 + warp * 16;
  const int64_t ra = min(wr0 + lane / 4, n - 1), rb = min(wr0 + lane / 4 + 8, n - 1);
  const int64_t pos_a = first_pos + ra, pos_b = first_pos + rb;
  const int64_t warp_last = first_pos + min(wr0 + 15, n - 1);
  const uint16_t* qb = static_cast<const uint16_t*>(a.query);
  // Q fragments: k-chunk c covers dims 16c..16c+15; a[0]/a[1]: rows a/b at dims 2(lane%4)
  // and +1; a[2]/a[3]: the same 8 dims further.
  // kQShared: the warp's 16 rows [row][d] (pitch kLd) after the two stages, each row
  // clamped to the sequence as above; the fragments load with ldmatrix per tile.
  uint32_t qf[kQShared ? 1 : D / 16][4];
  uint16_t* qs = staged + 2 * kStage + warp * 16 * kLd;
  if constexpr (kQShared) {
#pragma unroll
    for (int e = lane; e < 16 * (D / 8); e += 32) {
      const int r = e / (D / 8), c = (e % (D / 8)) * 8;
      const int64_t row = min(wr0 + r, n - 1);
      *reinterpret_cast<uint4*>(qs + r * kLd + c) =
          *reinterpret_cast<const uint4*>(qb + ((q0 + row) * a.Hq + h) * D + c);
    }
    __syncwarp();
  } else {
    const uint32_t* qa = reinterpret_cast<const uint32_t*>(qb + ((q0 + ra) * a.Hq + h) * D);
    const uint32_t* qbr = reinterpret_cast<const uint32_t*>(qb + ((q0 + rb) * a.Hq + h) * D);
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      const int w = c * 8 + lane % 4;  // 32-bit word of dims 16c + 2(lane%4)
      qf[c][0] = qa[w];
      qf[c][1] = qbr[w];
      qf[c][2] = qa[w + 4];
      qf[c][3] = qbr[w + 4];
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const float score_scale = kFp8 ? a.scale * a.k_scale : a.scale;

  const int64_t tiles = cta_last / kTok + 1;
  StageTile<D, kFp8, kWarps * 32>(a, table, kh, 0, static_cast<int>(min(int64_t{kTok}, cta_last + 1)), staged);
  CpAsyncCommit();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t tok0 = tile * kTok;
    if (tile + 1 < tiles) {  // the next tile into the other stage (consumed one iteration ago)
      const int64_t next0 = tok0 + kTok;
      StageTile<D, kFp8, kWarps * 32>(a, table, kh, next0, static_cast<int>(min(int64_t{kTok}, cta_last + 1 - next0)),
                                      staged + ((tile + 1) % 2) * kStage);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();  // this thread's copies of tile `tile` have landed
    __syncthreads();   // and every thread's
    const uint16_t* ks = staged + (tile % 2) * kStage;
    const uint16_t* vs = ks + kTok * kLd;
    if (tok0 <= warp_last) {  // warp-uniform: else no token of this tile is visible to its rows
      // S = Q K^T for 8 chunks of 8 tokens: sc[t][0..1] row a, tokens 8t + 2(lane%4) + {0,1};
      // sc[t][2..3] row b. One ldmatrix.x4 gives the B fragments of two 16-dim chunks.
      float sc[kTok / 8][4];
      if constexpr (kQShared) {
        // Q's chunks c and c + 1 once per tile (ldmatrix: matrices rows 0-7 / 8-15 of dims
        // 0-7, then of dims 8-15 — the A fragment), each against the 8 token chunks.
#pragma unroll
        for (int t = 0; t < kTok / 8; ++t) sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.0f;
        const uint16_t* qr = qs + ((lane / 8) % 2 * 8 + lane % 8) * kLd + (lane / 16) * 8;
#pragma unroll
        for (int c = 0; c < D / 16; c += 2) {
          uint32_t q0f[4], q1f[4];
          LdMatrixX4(q0f, qr + c * 16);
          LdMatrixX4(q1f, qr + (c + 1) * 16);
#pragma unroll
          for (int t = 0; t < kTok / 8; ++t) {
            uint32_t b[4];
            LdMatrixX4(b, ks + (t * 8 + lane % 8) * kLd + (lane / 8) * 8 + c * 16);
            Mma(sc[t], q0f, b[0], b[1]);
            Mma(sc[t], q1f, b[2], b[3]);
          }
        }
      } else {
#pragma unroll
        for (int t = 0; t < kTok / 8; ++t) {
          sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.0f;
          const uint16_t* kr = ks + (t * 8 + lane % 8) * kLd + (lane / 8) * 8;
#pragma unroll
          for (int c = 0; c < D / 16; c += 2) {
            uint32_t b[4];
            LdMatrixX4(b, kr + c * 16);
            Mma(sc[t], qf[c], b[0], b[1]);
            Mma(sc[t], qf[c + 1], b[2], b[3]);
          }
        }
      }
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int t = 0; t < kTok / 8; ++t)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int64_t tok = tok0 + t * 8 + 2 * (lane % 4) + u;
          sc[t][u] = tok <= pos_a ? sc[t][u] * score_scale : -INFINITY;
          sc[t][2 + u] = tok <= pos_b ? sc[t][2 + u] * score_scale : -INFINITY;
          mx_a = fmaxf(mx_a, sc[t][u]);
          mx_b = fmaxf(mx_b, sc[t][2 + u]);
        }
#pragma unroll
      for (int off = 1; off <= 2; off *= 2) {
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xFFFFFFFFu, mx_a, off));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xFFFFFFFFu, mx_b, off));
      }
      const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
      // A row whose every token so far is masked keeps m = -inf: nothing to rescale or add.
      const float res_a = mn_a == -INFINITY ? 1.0f : expf(m_a - mn_a);
      const float res_b = mn_b == -INFINITY ? 1.0f : expf(m_b - mn_b);
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int t = 0; t < kTok / 8; ++t)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          sc[t][u] = sc[t][u] == -INFINITY ? 0.0f : expf(sc[t][u] - mn_a);
          sc[t][2 + u] = sc[t][2 + u] == -INFINITY ? 0.0f : expf(sc[t][2 + u] - mn_b);
          sum_a += sc[t][u];
          sum_b += sc[t][2 + u];
        }
#pragma unroll
      for (int off = 1; off <= 2; off *= 2) {
        sum_a += __shfl_xor_sync(0xFFFFFFFFu, sum_a, off);
        sum_b += __shfl_xor_sync(0xFFFFFFFFu, sum_b, off);
      }
      l_a = l_a * res_a + sum_a;
      l_b = l_b * res_b + sum_b;
      m_a = mn_a;
      m_b = mn_b;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= res_a;
        o[j][1] *= res_a;
        o[j][2] *= res_b;
        o[j][3] *= res_b;
      }
      // O += P V: k-chunk kk (tokens 16kk..16kk+15) takes P from the S chunks 2kk and 2kk+1;
      // one ldmatrix.x4.trans gives the V fragments of two 8-dim blocks.
#pragma unroll
      for (int kk = 0; kk < kTok / 16; ++kk) {
        const float* p4[4] = {&sc[2 * kk][0], &sc[2 * kk][2], &sc[2 * kk + 1][0], &sc[2 * kk + 1][2]};
        uint32_t pa[4], pl[4];  // P = hi + lo as two BF16 terms (SplitP)
#pragma unroll
        for (int r = 0; r < 4; ++r) SplitP(p4[r][0], p4[r][1], pa[r], pl[r]);
        const uint16_t* vr = vs + (kk * 16 + (lane / 8) % 2 * 8 + lane % 8) * kLd + (lane / 16) * 8;
        AccumulatePV<D>(o, pa, pl, vr);
      }
    }
    __syncthreads();  // this stage is consumed before the next iteration refills it
  }
  // O[row][dims 8j + 2(lane%4) + {0,1}] / l, rounded once; rows past the sequence are not stored.
  uint16_t* ob = static_cast<uint16_t*>(a.out);
  const bool store_a = wr0 + lane / 4 < n, store_b = wr0 + lane / 4 + 8 < n;
  const float o_scale = kFp8 ? a.v_scale : 1.0f;
  const float inv_a = o_scale / l_a, inv_b = o_scale / l_b;
  uint32_t* oa = reinterpret_cast<uint32_t*>(ob + ((q0 + ra) * a.Hq + h) * D);
  uint32_t* obr = reinterpret_cast<uint32_t*>(ob + ((q0 + rb) * a.Hq + h) * D);
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    if (store_a) oa[j * 4 + lane % 4] = PackBf16(o[j][0] * inv_a, o[j][1] * inv_a);
    if (store_b) obr[j * 4 + lane % 4] = PackBf16(o[j][2] * inv_b, o[j][3] * inv_b);
  }
}

}  // namespace

bool PrefillMmaFits(const CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  if (query != DType::kBF16 || (cache != DType::kBF16 && cache != DType::kF8E4M3)) return false;
  if (!a.vec16 || cq.cc_major < 8) return false;
  // D = 256 takes 169 KB of shared memory (two stages and Q): sm_90's opt-in limit allows it.
  if (a.D != 64 && a.D != 128 && !(a.D == 256 && cq.cc_major >= 9)) return false;
  return AttnItems(a.T, a.S, 1, kRows) * a.Hq < (int64_t{1} << 31);
}

bool LaunchPrefillMma(CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  if (!PrefillMmaFits(cq, a, query, cache)) return false;
  // Worth it only when sequences bring many rows: on average at least a CTA's worth (in a
  // mixed step the one-row sequences' CTAs return at once).
  if (!a.mixed && a.T < static_cast<int64_t>(kRows) * a.S) return false;
  const bool fp8 = cache == DType::kF8E4M3;
  const int64_t items = AttnItems(a.T, a.S, 1, kRows);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  const auto kernel = a.D == 64    ? (fp8 ? PrefillMmaKernel<64, true> : PrefillMmaKernel<64, false>)
                      : a.D == 128 ? (fp8 ? PrefillMmaKernel<128, true> : PrefillMmaKernel<128, false>)
                                   : (fp8 ? PrefillMmaKernel<256, true> : PrefillMmaKernel<256, false>);
  const int d = static_cast<int>(a.D);
  const size_t smem = TwoTileSmemBytes(d) + (a.D > 128 ? size_t{kRows} * TileRow(d) * sizeof(uint16_t) : 0);
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  LaunchOverlapped(cq, "PrefillMmaKernel", kernel, static_cast<unsigned>(items * a.Hq), kWarps * 32, smem, a, items);
  return true;
}

int64_t PrefillMmaLaunches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
