// CUDA PagedAttention for prefill on tensor cores (mma.sync m16n8k16, BF16 in, f32
// accumulate), in the manner of FlashAttention-2 over vLLM's paged cache.
//
// A CTA of kWarps warps serves 16 * kWarps consecutive query rows of one sequence and one
// query head; warp w owns 16 rows. Tiles of kTok cached tokens of that head's KV head are
// staged in shared memory (K as [token][d], V transposed to [d][token] so both mma operands
// load as 32-bit pairs). Per tile each warp computes S = Q K^T (f32), scales it, masks
// tokens past each row's position, updates its rows' running max and sum (online softmax
// in f32), splits P into two BF16 terms (P rounded, and the rest rounded) and accumulates
// O += P_hi V + P_lo V in f32. The result is O / sum rounded once to BF16. P rounded once to
// BF16, as FlashAttention does, missed the float64 bound by up to 1 ulp of the output where
// the weighted values cancel; the split keeps about 16 bits of P.
// An F8E4M3 cache is staged as BF16 (every e4m3 value is exact in BF16), its k_scale folded
// into the score scale and its v_scale into the output.
// Metadata checks are the CUDA-core kernel's (device_error.h).
#include <atomic>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"

namespace vt::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // query rows per CTA
constexpr int kTok = 64;            // cached tokens per tile

std::atomic<int64_t> g_launches{0};

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(FloatToBf16(lo)) | (static_cast<uint32_t>(FloatToBf16(hi)) << 16);
}

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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

// The 8 cache elements at element offset i as BF16 bits in one 16-byte word.
template <bool kFp8>
__device__ __forceinline__ uint4 LoadCache8(const void* cache, int64_t i) {
  if constexpr (kFp8)
    return Fp8x8ToBf16x8(*reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(cache) + i));
  else
    return *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(cache) + i);
}

template <int D, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) PrefillMmaKernel(AttnArgs a) {
  PdlWait();
  constexpr int kLdK = D + 8;    // bf16 elements per K row (pad: spreads banks)
  constexpr int kLdV = kTok + 8;  // bf16 elements per transposed V row
  __shared__ __align__(16) uint16_t ks[kTok * kLdK];
  __shared__ __align__(16) uint16_t vts[D * kLdV];
  __shared__ int64_t tok_src[kTok];
  __shared__ int bad_block;
  const int64_t h = blockIdx.y, kh = h / a.group;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (h == 0 && threadIdx.x == 0) ReportAttnSeq(a, blockIdx.x);
  int64_t s, row_block;  // the sequence, and this CTA's block of kRows rows within it
  AttnFindItem(a, blockIdx.x, 1, kRows, s, row_block);
  AttnSeq seq;
  if (row_block < 0 || !ReadAttnSeq(a, s, false, seq)) return;
  const int64_t q0 = seq.q0, n = seq.n, ctx = seq.ctx;
  const int64_t r0 = row_block * kRows;  // first row of this CTA
  if (r0 >= n) return;            // uniform
  const int64_t first_pos = ctx - n;
  const int64_t cta_last = first_pos + min(r0 + kRows, n) - 1;  // last position any row sees
  const int32_t* table = a.block_tables + s * a.max_blocks;
  if (threadIdx.x == 0) bad_block = 0;
  __syncthreads();
  for (int64_t b = threadIdx.x; b * a.block_size <= cta_last; b += blockDim.x) {
    const int64_t id = table[b];
    if (id < 0 || id >= a.num_blocks) {
      bad_block = 1;
      RecordIndexError(a.err, IndexError::kAttnBlockId, s, id, a.num_blocks, b);
    }
  }
  __syncthreads();
  if (bad_block) return;  // uniform

  // This thread's two rows of its warp's 16 (fragment rows lane/4 and lane/4 + 8), clamped
  // to the sequence: a row past n is computed on the last row's data and not stored.
  const int64_t wr0 = r0 + warp * 16;
  const int64_t ra = min(wr0 + lane / 4, n - 1), rb = min(wr0 + lane / 4 + 8, n - 1);
  const int64_t pos_a = first_pos + ra, pos_b = first_pos + rb;
  const int64_t warp_last = first_pos + min(wr0 + 15, n - 1);
  const uint16_t* qb = static_cast<const uint16_t*>(a.query);
  // Q fragments: k-chunk c covers dims 16c..16c+15; a[0]/a[1]: rows a/b at dims 2(lane%4)
  // and +1; a[2]/a[3]: the same 8 dims further.
  uint32_t qf[D / 16][4];
  {
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

  for (int64_t tok0 = 0; tok0 <= cta_last; tok0 += kTok) {
    const int count = static_cast<int>(min(static_cast<int64_t>(kTok), cta_last + 1 - tok0));
    __syncthreads();  // the previous tile is consumed
    if (threadIdx.x < kTok) {
      const int64_t tok = tok0 + threadIdx.x;
      int64_t src = -1;
      if (threadIdx.x < count) {
        const int64_t block = table[tok / a.block_size];
        src = ((block * a.block_size + tok % a.block_size) * a.Hk + kh) * D;
      }
      tok_src[threadIdx.x] = src;
    }
    __syncthreads();
    constexpr int kVecs = D / 8;  // 16-byte vectors per row
    for (int e = threadIdx.x; e < kTok * kVecs; e += blockDim.x) {
      const int j = e / kVecs, c = (e - j * kVecs) * 8;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (tok_src[j] >= 0) {
        kv = LoadCache8<kFp8>(a.key_cache, tok_src[j] + c);
        vv = LoadCache8<kFp8>(a.value_cache, tok_src[j] + c);
      }
      *reinterpret_cast<uint4*>(ks + j * kLdK + c) = kv;
      const uint16_t* ve = reinterpret_cast<const uint16_t*>(&vv);
#pragma unroll
      for (int u = 0; u < 8; ++u) vts[(c + u) * kLdV + j] = ve[u];
    }
    __syncthreads();
    if (tok0 > warp_last) continue;  // warp-uniform: no token of this tile is visible to its rows

    // S = Q K^T for 8 chunks of 8 tokens: sc[t][0..1] row a, tokens 8t + 2(lane%4) + {0,1};
    // sc[t][2..3] row b.
    float sc[kTok / 8][4];
#pragma unroll
    for (int t = 0; t < kTok / 8; ++t) {
      sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.0f;
      const uint16_t* kr = ks + (t * 8 + lane / 4) * kLdK + 2 * (lane % 4);
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kr + c * 16);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kr + c * 16 + 8);
        Mma(sc[t], qf[c], b0, b1);
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
    // O += P V: k-chunk kk (tokens 16kk..16kk+15) takes P from the S chunks 2kk and 2kk+1.
#pragma unroll
    for (int kk = 0; kk < kTok / 16; ++kk) {
      // P as two BF16 terms, p = hi + lo (hi = p rounded, lo = the rest rounded): two
      // products keep P to about 16 bits, so its rounding does not show in the output.
      const float* p4[4] = {&sc[2 * kk][0], &sc[2 * kk][2], &sc[2 * kk + 1][0], &sc[2 * kk + 1][2]};
      uint32_t pa[4], pl[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float x0 = p4[r][0], x1 = p4[r][1];
        pa[r] = PackBf16(x0, x1);
        pl[r] = PackBf16(x0 - Bf16ToFloat(FloatToBf16(x0)), x1 - Bf16ToFloat(FloatToBf16(x1)));
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const uint16_t* vr = vts + (j * 8 + lane / 4) * kLdV + kk * 16 + 2 * (lane % 4);
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(vr);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(vr + 8);
        Mma(o[j], pa, b0, b1);
        Mma(o[j], pl, b0, b1);
      }
    }
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

bool LaunchPrefillMma(CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  const bool fp8 = cache == DType::kF8E4M3;
  if (query != DType::kBF16 || (cache != DType::kBF16 && !fp8)) return false;
  if (!a.vec16 || (a.D != 64 && a.D != 128) || cq.cc_major < 8) return false;
  // Worth it only when sequences bring many rows: on average at least a CTA's worth.
  if (a.T < static_cast<int64_t>(kRows) * a.S) return false;
  const int64_t items = AttnItems(a.T, a.S, 1, kRows);
  if (a.Hq > 65535 || items >= (int64_t{1} << 31)) return false;
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hq));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  const auto kernel = a.D == 64 ? (fp8 ? PrefillMmaKernel<64, true> : PrefillMmaKernel<64, false>)
                                : (fp8 ? PrefillMmaKernel<128, true> : PrefillMmaKernel<128, false>);
  LaunchOverlapped(cq, "PrefillMmaKernel", kernel, grid, kWarps * 32, 0, a);
  return true;
}

int64_t PrefillMmaLaunches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
