// Internal to attention_decode_mma.cu: the tensor-core decode attention with the query heads
// as the N columns of its products, the form an F8E4M3 cache takes (LaunchDecodeMma says
// when). Per warp and 16 tokens: S^T = K Q^T (K the A operand, 16 tokens x 16 dims; the
// group's heads the 8 columns of B), online softmax per head across the lanes of a column,
// then O^T += V^T P^T with P^T moved from the C fragments into the B operand by movmatrix:
// half the products of the first form (whose 16-row operand holds at most 8 heads) and fewer
// registers. Layout, staging, scaling and the merge are the first form's
// (attention_decode_mma.cu's header).
#pragma once

#include "vt/cuda/attention_decode_mma.cuh"
#include "vt/cuda/attention_split.cuh"
#include "vt/cuda/device_util.cuh"

namespace vt::cuda {

// The kernel's work before its splits are combined; every return is uniform across the CTA.
// kEarly (AttnArgs::early_context): the sequence's metadata, block table and, for a sequence
// of one row, its first tile but the newest token are read before griddepcontrol.wait,
// which this function then runs; the newest token's row is staged after it.
template <int D, bool kEarly, bool kFp8>
__device__ __forceinline__ void DecodeMmaRowsN(const AttnArgs& a) {
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
    // O^T: m-block j, thread rows r0 = lane / 4 and r0 + 8 (dims 16j + r, kFp8: (D / 16) r + j),
    // columns the heads 2 quad and 2 quad + 1.
    float o[D / 16][4];
#pragma unroll
    for (int j = 0; j < D / 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
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
    const int r0 = lane / 4;
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
      if (wt0 < end) {  // warp-uniform
        // S^T = K Q^T: sc = S[tokens r0, r0 + 8][heads 2 quad, +1] as {r0: h, h + 1; r0 + 8: h, h + 1}.
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (kFp8) {
          const uint8_t* kr = stage + (warp * 16 + r0) * Fp8KRow(D) + 16 * quad;
#pragma unroll
          for (int h = 0; h < D / 64; ++h) {
            const uint4 k0 = *reinterpret_cast<const uint4*>(kr + 64 * h);
            const uint4 k8 = *reinterpret_cast<const uint4*>(kr + 8 * Fp8KRow(D) + 64 * h);
            const uint32_t w0[4] = {k0.x, k0.y, k0.z, k0.w}, w8[4] = {k8.x, k8.y, k8.z, k8.w};
#pragma unroll
            for (int c4 = 0; c4 < 4; ++c4) {
              const uint32_t af[4] = {Fp8PairToF16x2(w0[c4]), Fp8PairToF16x2(w8[c4]), Fp8PairToF16x2(w0[c4] >> 16),
                                      Fp8PairToF16x2(w8[c4] >> 16)};
              MmaF16(sc, af, qf[4 * h + c4][0], qf[4 * h + c4][2]);
            }
          }
        } else {
          const uint16_t* kr =
              reinterpret_cast<const uint16_t*>(stage) + (warp * 16 + lane % 16) * kLd + (lane / 16) * 8;
#pragma unroll
          for (int c = 0; c < D / 16; ++c) {
            uint32_t af[4];
            LdMatrixX4(af, kr + c * 16);
            Mma(sc, af, qf[c][0], qf[c][2]);
          }
        }
        float mx[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t ta = wt0 + r0, tb = ta + 8;
          sc[e] = ta < end ? sc[e] * score_scale : -INFINITY;
          sc[2 + e] = tb < end ? sc[2 + e] * score_scale : -INFINITY;
          mx[e] = fmaxf(sc[e], sc[2 + e]);
#pragma unroll
          for (int off = 4; off <= 16; off *= 2) mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xFFFFFFFFu, mx[e], off));
        }
        float res[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float mn = fmaxf(m[e], mx[e]);  // finite: token wt0 < end is visible
          res[e] = expf(m[e] - mn);              // 0 on the warp's first visible tile
          sc[e] = sc[e] == -INFINITY ? 0.0f : expf(sc[e] - mn);
          sc[2 + e] = sc[2 + e] == -INFINITY ? 0.0f : expf(sc[2 + e] - mn);
          float sum = sc[e] + sc[2 + e];
#pragma unroll
          for (int off = 4; off <= 16; off *= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
          l[e] = l[e] * res[e] + sum;
          m[e] = mn;
        }
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          o[j][0] *= res[0];
          o[j][1] *= res[1];
          o[j][2] *= res[0];
          o[j][3] *= res[1];
        }
        // P^T as the B operand of O^T += V^T P^T: the C fragments of tokens 0-7 and 8-15
        // transposed in registers (movmatrix), each P split in two terms.
        uint32_t ph[2], pl[2];
        if constexpr (kFp8) {
          SplitPF16(sc[0], sc[1], ph[0], pl[0]);
          SplitPF16(sc[2], sc[3], ph[1], pl[1]);
        } else {
          SplitP(sc[0], sc[1], ph[0], pl[0]);
          SplitP(sc[2], sc[3], ph[1], pl[1]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          ph[i] = MovMatrixTrans(ph[i]);
          pl[i] = MovMatrixTrans(pl[i]);
        }
        if constexpr (kFp8) {
          // Rows r0 and r0 + 8 of every m-block: bytes [(D / 16) r, +D / 16) of tokens 2 quad,
          // +1, +8, +9 (byte j is m-block j).
          constexpr int kW = D / 64;  // 32-bit words per lane, token and row
          const uint8_t* vr = stage + kTileTok * Fp8KRow(D) + (warp * 16 + 2 * quad) * Fp8VRow(D);
          uint32_t v[2][4][kW];  // [row r0 / r0 + 8][token 2 quad, +1, +8, +9][word]
#pragma unroll
          for (int rr = 0; rr < 2; ++rr)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint8_t* at = vr + ((i / 2) * 8 + i % 2) * Fp8VRow(D) + (D / 16) * (r0 + 8 * rr);
              if constexpr (kW == 2) {
                const uint2 w = *reinterpret_cast<const uint2*>(at);
                v[rr][i][0] = w.x;
                v[rr][i][1] = w.y;
              } else {
                v[rr][i][0] = *reinterpret_cast<const uint32_t*>(at);
              }
            }
#pragma unroll
          for (int w = 0; w < kW; ++w) {
            uint32_t lo[2][4], hi[2][4];  // [row][byte]: pairs (token 2 quad, +1) and (+8, +9)
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
              const uint32_t a01 = __byte_perm(v[rr][0][w], v[rr][1][w], 0x5140);
              const uint32_t a23 = __byte_perm(v[rr][0][w], v[rr][1][w], 0x7362);
              const uint32_t b01 = __byte_perm(v[rr][2][w], v[rr][3][w], 0x5140);
              const uint32_t b23 = __byte_perm(v[rr][2][w], v[rr][3][w], 0x7362);
              lo[rr][0] = a01;
              lo[rr][1] = a01 >> 16;
              lo[rr][2] = a23;
              lo[rr][3] = a23 >> 16;
              hi[rr][0] = b01;
              hi[rr][1] = b01 >> 16;
              hi[rr][2] = b23;
              hi[rr][3] = b23 >> 16;
            }
#pragma unroll
            for (int b = 0; b < 4; ++b) {
              const uint32_t af[4] = {Fp8PairToF16x2(lo[0][b]), Fp8PairToF16x2(lo[1][b]), Fp8PairToF16x2(hi[0][b]),
                                      Fp8PairToF16x2(hi[1][b])};
              MmaF16(o[4 * w + b], af, ph[0], ph[1]);
              MmaF16(o[4 * w + b], af, pl[0], pl[1]);
            }
          }
        } else {
          // ldmatrix.trans of V rows: matrix q holds tokens 8 (q / 2) .. +7, dims 8 (q % 2) .. +7.
          const uint16_t* vr = reinterpret_cast<const uint16_t*>(stage) + kTileTok * kLd +
                               (warp * 16 + (lane / 16) * 8 + lane % 8) * kLd + ((lane / 8) % 2) * 8;
#pragma unroll
          for (int j = 0; j < D / 16; ++j) {
            uint32_t af[4];
            LdMatrixX4Trans(af, vr + 16 * j);
            Mma(o[j], af, ph[0], ph[1]);
            Mma(o[j], af, pl[0], pl[1]);
          }
        }
      }
      __syncthreads();  // this stage is consumed before it is refilled
    }
    // Merge the warps: lanes r0 = 0 hold (m, l) of heads 2 quad, +1; every lane its O^T values.
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int hd = 2 * quad + e;
      if (hd >= g) continue;
      if (r0 == 0) {
        red_ml[(warp * kMaxGroup + hd) * 2] = m[e];
        red_ml[(warp * kMaxGroup + hd) * 2 + 1] = l[e];
      }
      float* acc = red_acc + (warp * kMaxGroup + hd) * D;
#pragma unroll
      for (int j = 0; j < D / 16; ++j)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int r = r0 + 8 * rr;
          acc[kFp8 ? (D / 16) * r + j : 16 * j + r] = o[j][2 * rr + e];
        }
    }
    __syncthreads();
    DecodeMergeWarps<D, kFp8>(a, red_acc, red_ml, g, t, kh, work.partials);
  }
}

}  // namespace vt::cuda
