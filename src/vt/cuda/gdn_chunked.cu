// The chunked gated delta rule: the long sequences of a prefill step (gdn.cu launches it
// beside the token-by-token kernel, each taking the sequences the other skips).
//
// Per head the recurrence is S_t = g_t S_{t-1} + k_t d_t^T with d_t = b_t (v_t - g_t
// S_{t-1}^T k_t) and o_t = S_t^T q_t (q, k L2-normalised, q scaled by 1/sqrt(dk)). Over a
// chunk of n <= 64 tokens starting from state S, with G_i the sum of log g over the chunk's
// tokens up to i and Γ_i = exp(G_i):
//   A_ij = b_i exp(G_i - G_j) k_i·k_j (j < i),       Tb = (I + A)^-1 diag(b),
//   Δ    = Tb (V - diag(Γ) K S),                     (the d_t of the chunk's tokens)
//   O    = diag(Γ) Q S + P Δ,   P_ij = exp(G_i - G_j) q_i·k_j (j <= i),
//   S'   = Γ_n S + K^T diag(exp(G_n - G)) Δ.
// This is HF's torch_chunk_gated_delta_rule with Δ taken as Tb (V - Γ K S) rather than
// U - W S (the same product, without forming W). Every column of S evolves on its own, so a
// CTA takes kChunkCols columns of one head of one sequence and walks its chunks in order;
// the column-free parts (A, Tb, P) are computed by each of a head's dv / kChunkCols CTAs.
// All arithmetic is f32 on the CUDA cores (products of 64 x 128 tiles from shared memory,
// 4 x 4 or 4 x 2 outputs a thread); Tb comes from a forward substitution, one thread per
// column of Tb with the column in registers. Rows of a short last chunk are zero (b = 0, no
// decay), which adds nothing.
#include <cstdint>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/gdn_common.cuh"
#include "vt/cuda/kernels.h"

namespace vt::cuda::gdn {

namespace {

constexpr int kDk = static_cast<int>(kChunkDk), kC = static_cast<int>(kChunkTokens);
constexpr int kCols = static_cast<int>(kChunkCols), kThreads = 256;
constexpr int kLd = kC + 4;      // row stride of the [*][64] arrays: float4-aligned rows
constexpr int kLdS = kCols + 4;  // row stride of the [*][32] arrays
static_assert(kDk == 128 && kC == 64 && kCols == 32 && kThreads == 256, "the thread maps below assume these");

struct ChunkSmem {
  float qT[kDk * kLd];   // q^T [d][m], normalised and scaled
  float kT[kDk * kLd];   // k^T [d][m], normalised
  float a[kC * kLd];     // A [i][j]
  float tbT[kC * kLd];   // Tb^T [j][i]
  float pT[kC * kLd];    // P^T [j][i]
  float s[kDk * kLdS];   // the CTA's columns of the state [d][c]
  float x[kC * kLdS];    // v, then v - Γ (k S)
  float dl[kC * kLdS];   // Δ
  float de[kC * kLdS];   // Δ exp(G_n - G)
  float beta[kC], g[kC], gam[kC], e[kC];
};

__device__ __forceinline__ float4 Ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float2 Ld2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float At(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ float At(const float2& v, int i) { return i == 0 ? v.x : v.y; }

// acc[r][c] += Σ_m L[4ti + r][m] R[m][2tj + c] over m <= 4ti + 3, for L lower triangular and
// stored transposed (LT[m][i], rows of kLd) and R rows of kLdS: this thread's 4 x 2 tile.
__device__ __forceinline__ void LowerTileProduct(const float* LT, const float* R, int ti, int tj, float (&acc)[4][2]) {
  for (int m = 0; m < 4 * ti + 4; ++m) {
    const float4 l = Ld4(&LT[m * kLd + 4 * ti]);
    const float2 rv = Ld2(&R[m * kLdS + 2 * tj]);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c) acc[r][c] = fmaf(At(l, r), At(rv, c), acc[r][c]);
  }
}

// grid (nv * dv / kCols, S), kThreads threads, sizeof(ChunkSmem) of dynamic shared memory.
template <typename Tag>
__global__ void __launch_bounds__(kThreads, 1) GatedDeltaRuleChunkedKernel(GdnArgs g) {
  PdlWait();
  extern __shared__ float4 smem_raw[];
  ChunkSmem& sm = *reinterpret_cast<ChunkSmem*>(smem_raw);
  using T = typename Tag::T;
  const int tid = threadIdx.x;
  const int64_t col_blocks = g.dv / kCols;
  const int64_t h = blockIdx.x / col_blocks, s = blockIdx.y, j0 = (blockIdx.x % col_blocks) * kCols;
  const GdnSeq seq = ReadGdnSeq(g.qs, g.slots, s, g.S, g.T, g.num_slots, false, nullptr);  // gdn.cu reports
  if (!seq.range_ok || seq.t1 - seq.t0 < g.chunked_min) return;
  if (seq.slot < 0) {
    for (int64_t e = tid; e < (seq.t1 - seq.t0) * kCols; e += kThreads)
      StoreAny(g.out, g.od, ((seq.t0 + e / kCols) * g.nv + h) * g.dv + j0 + e % kCols, 0.0f);
    return;
  }
  float* Sg = g.state + (static_cast<int64_t>(seq.slot) * g.nv + h) * kDk * g.dv + j0;
  for (int e = tid; e < kDk * kCols; e += kThreads) sm.s[(e / kCols) * kLdS + e % kCols] = Sg[(e / kCols) * g.dv + e % kCols];
  const int64_t kh = h / (g.nv / g.nk);
  const float A = -expf(LoadAny(g.A_log, g.Ad, h));
  const float bias = LoadAny(g.dt_bias, g.dtd, h);
  const float qscale = 1.0f / sqrtf(static_cast<float>(kDk));
  const int ti = tid / 16, tj = tid % 16;  // rows 4ti..; A, P columns 4tj..; x, Δ, O columns 2tj..
  const int sd = tid / 8, sc = tid % 8;    // state rows 4sd.., columns 4sc..
  for (int64_t c0 = seq.t0; c0 < seq.t1; c0 += kC) {
    const int n = seq.t1 - c0 < kC ? static_cast<int>(seq.t1 - c0) : kC;
    // 1. The chunk's q and k, L2-normalised and transposed, v, b and log g; zeros past n.
    // A warp takes every 8th token, its lanes d = lane + 32 i: each load instruction reads 32
    // neighbouring elements of one row (a token per lane would touch 32 rows per load).
    {
#pragma unroll 2
      for (int mi = 0; mi < kC / 8; ++mi) {
        const int m = tid / 32 + 8 * mi, lane = tid % 32;
        float qv[4] = {}, kv[4] = {};
        if (m < n) {
          const int64_t row = ((c0 + m) * g.nk + kh) * kDk + lane;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            qv[i] = Tag::Load(static_cast<const T*>(g.query)[row + 32 * i]);
            kv[i] = Tag::Load(static_cast<const T*>(g.key)[row + 32 * i]);
          }
        }
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sq = fmaf(qv[i], qv[i], sq);
          sk = fmaf(kv[i], kv[i], sk);
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
          sq += __shfl_xor_sync(0xffffffffu, sq, o);
          sk += __shfl_xor_sync(0xffffffffu, sk, o);
        }
        const float qinv = qscale / sqrtf(sq + 1e-6f), kinv = 1.0f / sqrtf(sk + 1e-6f);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sm.qT[(lane + 32 * i) * kLd + m] = qv[i] * qinv;
          sm.kT[(lane + 32 * i) * kLd + m] = kv[i] * kinv;
        }
      }
      for (int e = tid; e < kC * kCols; e += kThreads) {
        const int m = e / kCols, c = e % kCols;
        sm.x[m * kLdS + c] =
            m < n ? Tag::Load(static_cast<const T*>(g.value)[((c0 + m) * g.nv + h) * g.dv + j0 + c]) : 0.0f;
      }
      if (tid < kC) {
        const bool on = tid < n;
        const float av = on ? Tag::Load(static_cast<const T*>(g.a)[(c0 + tid) * g.nv + h]) : 0.0f;
        const float bv = on ? Tag::Load(static_cast<const T*>(g.b)[(c0 + tid) * g.nv + h]) : 0.0f;
        sm.g[tid] = on ? A * Softplus(av + bias) : 0.0f;
        sm.beta[tid] = on ? 1.0f / (1.0f + expf(-bv)) : 0.0f;
      }
    }
    __syncthreads();
    {
      if (tid < 32) {  // G: the running sum of log g, two tokens a lane
        const float g0 = sm.g[2 * tid], g1 = sm.g[2 * tid + 1];
        float incl = g0 + g1;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
          const float v = __shfl_up_sync(0xffffffffu, incl, o);
          if (tid >= o) incl += v;
        }
        const float total = __shfl_sync(0xffffffffu, incl, 31);
        const float G0 = incl - g1;
        sm.g[2 * tid] = G0;
        sm.g[2 * tid + 1] = incl;
        sm.gam[2 * tid] = expf(G0);
        sm.gam[2 * tid + 1] = expf(incl);
        sm.e[2 * tid] = expf(total - G0);
        sm.e[2 * tid + 1] = expf(total - incl);
      }
    }
    __syncthreads();
    // 2. A and P (4 x 4 a thread), k S and q S (4 x 2).
    float o[4][2];
    {
      float acc_a[4][4] = {}, acc_p[4][4] = {}, ks[4][2] = {}, qsv[4][2] = {};
#pragma unroll 4
      for (int d = 0; d < kDk; ++d) {
        const float4 qi = Ld4(&sm.qT[d * kLd + 4 * ti]), ki = Ld4(&sm.kT[d * kLd + 4 * ti]);
        const float4 kj = Ld4(&sm.kT[d * kLd + 4 * tj]);
        const float2 sv = Ld2(&sm.s[d * kLdS + 2 * tj]);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            acc_a[r][c] = fmaf(At(ki, r), At(kj, c), acc_a[r][c]);
            acc_p[r][c] = fmaf(At(qi, r), At(kj, c), acc_p[r][c]);
          }
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            ks[r][c] = fmaf(At(ki, r), At(sv, c), ks[r][c]);
            qsv[r][c] = fmaf(At(qi, r), At(sv, c), qsv[r][c]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 4 * ti + r;
        const float Gi = sm.g[i], bi = sm.beta[i], gi = sm.gam[i];
        float arow[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int j = 4 * tj + c;
          const float dec = j <= i ? expf(Gi - sm.g[j]) : 0.0f;
          arow[c] = j < i ? bi * dec * acc_a[r][c] : 0.0f;
          acc_p[r][c] *= dec;
        }
        *reinterpret_cast<float4*>(&sm.a[i * kLd + 4 * tj]) = make_float4(arow[0], arow[1], arow[2], arow[3]);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          sm.x[i * kLdS + 2 * tj + c] -= gi * ks[r][c];
          o[r][c] = gi * qsv[r][c];
        }
      }
#pragma unroll
      for (int c = 0; c < 4; ++c)
        *reinterpret_cast<float4*>(&sm.pT[(4 * tj + c) * kLd + 4 * ti]) =
            make_float4(acc_p[0][c], acc_p[1][c], acc_p[2][c], acc_p[3][c]);
    }
    __syncthreads();
    // 3. Tb = (I + A)^-1 diag(b): column c by forward substitution (A is zero on and above
    // its diagonal, so every row sums over all earlier entries of the column).
    if (tid < kC) {
      const int c = tid;
      float xs[kC];
#pragma unroll
      for (int i = 0; i < kC; ++i) xs[i] = 0.0f;
      const float bc = sm.beta[c];
#pragma unroll
      for (int i = 0; i < kC; ++i) {
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
        for (int j4 = 0; j4 < (i + 3) / 4; ++j4) {
          const float4 av = Ld4(&sm.a[i * kLd + 4 * j4]);
          s0 = fmaf(av.x, xs[4 * j4], s0);
          s1 = fmaf(av.y, xs[4 * j4 + 1], s1);
          s2 = fmaf(av.z, xs[4 * j4 + 2], s2);
          s3 = fmaf(av.w, xs[4 * j4 + 3], s3);
        }
        xs[i] = i < c ? 0.0f : i == c ? bc : -((s0 + s1) + (s2 + s3));
      }
#pragma unroll
      for (int i = 0; i < kC; i += 4)
        *reinterpret_cast<float4*>(&sm.tbT[c * kLd + i]) = make_float4(xs[i], xs[i + 1], xs[i + 2], xs[i + 3]);
    }
    __syncthreads();
    // 4. Δ = Tb x (Tb is lower triangular: rows 4ti.. need columns up to 4ti + 3).
    {
      float dacc[4][2] = {};
      LowerTileProduct(sm.tbT, sm.x, ti, tj, dacc);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 4 * ti + r;
        const float ei = sm.e[i];
        *reinterpret_cast<float2*>(&sm.dl[i * kLdS + 2 * tj]) = make_float2(dacc[r][0], dacc[r][1]);
        *reinterpret_cast<float2*>(&sm.de[i * kLdS + 2 * tj]) = make_float2(dacc[r][0] * ei, dacc[r][1] * ei);
      }
    }
    __syncthreads();
    // 5. O = Γ q S + P Δ, written out; the new state in registers until every read of the old one is done.
    float snew[4][4] = {};
    {
      LowerTileProduct(sm.pT, sm.dl, ti, tj, o);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 4 * ti + r;
        if (i < n)
#pragma unroll
          for (int c = 0; c < 2; ++c) StoreAny(g.out, g.od, ((c0 + i) * g.nv + h) * g.dv + j0 + 2 * tj + c, o[r][c]);
      }
#pragma unroll 2
      for (int m = 0; m < kC; m += 4) {
        float4 kv[4], dv[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) kv[r] = Ld4(&sm.kT[(4 * sd + r) * kLd + m]);
#pragma unroll
        for (int mm = 0; mm < 4; ++mm) dv[mm] = Ld4(&sm.de[(m + mm) * kLdS + 4 * sc]);
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int mm = 0; mm < 4; ++mm)
#pragma unroll
            for (int c = 0; c < 4; ++c) snew[r][c] = fmaf(At(kv[r], mm), At(dv[mm], c), snew[r][c]);
      }
      const float gn = sm.gam[kC - 1];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) snew[r][c] = fmaf(gn, sm.s[(4 * sd + r) * kLdS + 4 * sc + c], snew[r][c]);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 4; ++r)
      *reinterpret_cast<float4*>(&sm.s[(4 * sd + r) * kLdS + 4 * sc]) =
          make_float4(snew[r][0], snew[r][1], snew[r][2], snew[r][3]);
  }
  __syncthreads();
  for (int e = tid; e < kDk * kCols; e += kThreads) Sg[(e / kCols) * g.dv + e % kCols] = sm.s[(e / kCols) * kLdS + e % kCols];
}

}  // namespace

void LaunchGatedDeltaRuleChunked(CudaQueue& cq, const GdnArgs& g) {
  VT_CHECK(g.dk == kDk && g.dv % kCols == 0, "GatedDeltaRule chunked on cuda: head of ", g.dk, " x ", g.dv,
           " is not ", kDk, " x a multiple of ", kCols);
  const auto kernel = g.qd == DType::kBF16 ? GatedDeltaRuleChunkedKernel<Bf16> : GatedDeltaRuleChunkedKernel<F32>;
  const size_t smem = sizeof(ChunkSmem);
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  LaunchOverlapped(cq, "GatedDeltaRuleChunkedKernel", kernel,
                   dim3(static_cast<unsigned>(g.nv * (g.dv / kCols)), static_cast<unsigned>(g.S)), kThreads, smem, g);
}

}  // namespace vt::cuda::gdn
