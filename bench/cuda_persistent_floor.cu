// What one persistent kernel could make of a Qwen3-0.6B FP8 batch-1 decode step
// (cuda_fp8_bench --persistent). The engine's step is a replayed chain of about 230 kernels
// (eight a layer); bench/README.md measured that chain's own floor and each kind's
// marginal cost, and three fusions of the norms into the GEMVs lost. This measures the
// other design before anyone builds it into the model: one CTA per SM for the whole step,
// a hand-over where a layer's data depends on every CTA (after q/k/v, the attention,
// o_proj, gate/up and down: five a layer; a grid barrier, or values stored with a tag
// their readers poll: Params::mode), each CTA's rows of the four projections of
// the next layer copied into its shared memory by bulk copies while this layer runs, the
// input norms made by every CTA for itself (1,024 values), the attention of one token by
// one CTA per query head (q/k RMSNorm, RoPE, the new key and value written to a
// contiguous BF16 cache, softmax over the context), SiLU-mul and the FP8 codes of every
// GEMV input in the stages' epilogues (the products by FMAs or on the tensor cores), the
// BF16 lm_head streamed by all CTAs at the end.
// Random weights of the 0.6B widths; the result is checked against a host computation of
// the same math (so the timed kernel is shown to do the work), and the step's bytes are
// set against a read of the same buffers by the streaming roofline kernel, in the same run.
// Not the model's numerics: residual and q/k/v in f32, one scale per kind of GEMV input,
// the gate/up rows laid out per CTA; a measurement, not a path of the engine.
// This file is the device code; cuda_persistent_floor_run.cu the host reference and the runs.
#include "cuda_persistent_floor.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "vt/cuda/fp8_stream.cuh"
#include "vt/dtype.h"

namespace persistent_floor {
namespace {

__device__ __forceinline__ uint8_t Code(float v) { return vt::FloatToFp8E4M3(fminf(fmaxf(v, -448.0f), 448.0f)); }

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// rows rows of bytes bytes each from src (contiguous) to dst (rows stride bytes apart), one
// bulk copy a row, completing on bar.
__device__ __forceinline__ void BulkCopyRows(uint64_t* bar, uint8_t* dst, const uint8_t* src, int rows, uint32_t bytes,
                                             uint32_t stride) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(rows * bytes)
               : "memory");
  for (int r = 0; r < rows; ++r)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     SmemAddr(dst + r * stride)),
                 "l"(src + static_cast<int64_t>(r) * bytes), "r"(bytes), "r"(SmemAddr(bar))
                 : "memory");
}

__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}" ::"r"(
          SmemAddr(bar)),
      "r"(parity)
      : "memory");
}

// Every CTA arrives, then waits for all: the writes before it are seen by every CTA after.
// fenced: __threadfence() before the release and after the acquire, as cooperative groups'
// grid sync has them (mode 4 leaves them out).
__device__ __forceinline__ void GridSync(unsigned* counter, unsigned& target, bool fenced = true) {
  target += gridDim.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (fenced) __threadfence();
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned v;
    do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    while (v < target);
    if (fenced) __threadfence();
  }
  __syncthreads();
}

// Mode 3's hand-over: one 64-bit store (single-copy atomic) carries a value and its tag.
__device__ __forceinline__ void Publish(uint64_t* word, uint32_t payload, uint32_t tag) {
  const uint64_t v = (static_cast<uint64_t>(tag) << 32) | payload;
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(word), "l"(v) : "memory");
}
__device__ __forceinline__ uint32_t Poll(const uint64_t* word, uint32_t tag) {
  uint64_t v;
  do asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
  while (static_cast<uint32_t>(v >> 32) != tag);
  return static_cast<uint32_t>(v);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// Sum over the CTA (1024 threads); red holds 33 floats.
__device__ float BlockSum(float v, float* red) {
  v = WarpSum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    const float s = WarpSum(red[threadIdx.x]);
    if (threadIdx.x == 0) red[32] = s;
  }
  __syncthreads();
  const float s = red[32];
  __syncthreads();
  return s;
}

// RMSNorm of the row (thread t holds element t) into FP8 codes in xs.
__device__ void NormCodesOf(float v, const float* nw, float inv_scale, uint8_t* xs, float* red) {
  const int t = threadIdx.x;
  const float r = rsqrtf(BlockSum(v * v, red) / kHidden + kEps);
  xs[t] = Code(v * r * nw[t] * inv_scale);
  __syncthreads();
}
// The same of the row h, written by other CTAs (read through L2).
__device__ void NormCodes(const float* h, const float* nw, float inv_scale, uint8_t* xs, float* red) {
  NormCodesOf(__ldcg(h + threadIdx.x), nw, inv_scale, xs, red);
}

// res[r] = sum_k w[r][k] x[k] over codes in shared memory (rows `stride` bytes apart;
// unscaled), by FMAs on decoded floats; warps share a row when there are fewer than 32 rows.
__device__ void SmemGemv(const uint8_t* wsm, int stride, int rows, int K, const uint8_t* xs, float* part, float* res) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int wpr = 1;
  while (wpr < 32 && rows * wpr * 2 <= 32) wpr *= 2;
  const int span = K / wpr, rows_at_once = 32 / wpr;
  for (int r0 = 0; r0 < rows; r0 += rows_at_once) {
    const int r = r0 + warp / wpr, piece = warp % wpr;
    float acc = 0.0f;
    if (r < rows) {
      const uint8_t* wr = wsm + r * stride + piece * span;
      const uint8_t* xr = xs + piece * span;
      for (int k = lane * 16; k < span; k += 512) {
        float a[16], b[16];
        vt::cuda::Fp8x16ToFloat(*reinterpret_cast<const uint4*>(wr + k), a);
        vt::cuda::Fp8x16ToFloat(*reinterpret_cast<const uint4*>(xr + k), b);
#pragma unroll
        for (int i = 0; i < 16; ++i) acc = fmaf(a[i], b[i], acc);
      }
    }
    acc = WarpSum(acc);
    if (lane == 0 && r < rows) part[r * wpr + piece] = acc;
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float s = 0.0f;
    for (int i = 0; i < wpr; ++i) s += part[threadIdx.x * wpr + i];
    res[threadIdx.x] = s;
  }
  __syncthreads();
}

// The same product on the tensor cores: m16n8k32 e4m3 x e4m3 -> f32 MMAs, a 16-row tile of
// the weights as A, x in every column of B (column 0 is read back); a tile's K steps split
// over 32 / tiles warps, their partials summed in a fixed order. Rows padded by 16 bytes
// keep the A loads free of bank conflicts.
__device__ void SmemGemvMma(const uint8_t* wsm, int stride, int rows, int K, const uint8_t* xs, float* part,
                            float* res) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int tiles = (rows + 15) / 16, per_tile = 32 / tiles, steps = K / 32;
  const int tile = warp / per_tile, wi = warp % per_tile;
  if (tile < tiles) {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int k0 = wi * steps / per_tile, k1 = (wi + 1) * steps / per_tile;
    const int r_lo = min(tile * 16 + g, rows - 1), r_hi = min(tile * 16 + g + 8, rows - 1);  // clamped rows: discarded
    const uint8_t* lo = wsm + r_lo * stride + tig * 4;
    const uint8_t* hi = wsm + r_hi * stride + tig * 4;
    const uint8_t* xb = xs + tig * 4;
    for (int kk = k0; kk < k1; ++kk) {
      const int kb = kk * 32;
      const uint32_t a0 = *reinterpret_cast<const uint32_t*>(lo + kb), a1 = *reinterpret_cast<const uint32_t*>(hi + kb);
      const uint32_t a2 = *reinterpret_cast<const uint32_t*>(lo + kb + 16),
                     a3 = *reinterpret_cast<const uint32_t*>(hi + kb + 16);
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xb + kb), b1 = *reinterpret_cast<const uint32_t*>(xb + kb + 16);
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    if (tig == 0) {
      part[(tile * per_tile + wi) * 16 + g] = d[0];
      part[(tile * per_tile + wi) * 16 + g + 8] = d[2];
    }
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    const int tl = threadIdx.x / 16;
    float sum = 0.0f;
    for (int i = 0; i < per_tile; ++i) sum += part[(tl * per_tile + i) * 16 + threadIdx.x % 16];
    res[threadIdx.x] = sum;
  }
  __syncthreads();
}

__device__ __forceinline__ void Range(int n, int& b, int& e) {
  b = static_cast<int>(static_cast<int64_t>(blockIdx.x) * n / gridDim.x);
  e = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * n / gridDim.x);
}

// The gate/up rows of CTA c (intermediate units [j0, j1)) start at byte 2 * j0 * kHidden:
// its gate rows, then its up rows.
struct Slots {
  int q0, q1, o0, o1, j0, j1;
  int rows[4];
  uint32_t row_bytes[4], stride[4];
  int64_t offset[4];  // within a layer's weights
  uint32_t smem[4];   // within the dynamic shared memory
};

__device__ Slots MakeSlots() {
  Slots s;
  Range(kQkv, s.q0, s.q1);
  Range(kHidden, s.o0, s.o1);
  Range(kInter, s.j0, s.j1);
  s.rows[0] = s.q1 - s.q0;
  s.rows[1] = s.rows[3] = s.o1 - s.o0;
  s.rows[2] = 2 * (s.j1 - s.j0);
  s.row_bytes[0] = s.row_bytes[2] = kHidden;
  s.row_bytes[1] = kAttnOut;
  s.row_bytes[3] = kInter;
  for (int i = 0; i < 4; ++i) s.stride[i] = s.row_bytes[i] + 16;
  s.offset[0] = int64_t{s.q0} * kHidden;
  s.offset[1] = kQkvBytes + int64_t{s.o0} * kAttnOut;
  s.offset[2] = kQkvBytes + kOBytes + int64_t{2} * s.j0 * kHidden;
  s.offset[3] = kQkvBytes + kOBytes + kGuBytes + int64_t{s.o0} * kInter;
  const int g = gridDim.x;
  const uint32_t cap[4] = {static_cast<uint32_t>((kQkv + g - 1) / g * (kHidden + 16)),
                           static_cast<uint32_t>((kHidden + g - 1) / g * (kAttnOut + 16)),
                           static_cast<uint32_t>(2 * ((kInter + g - 1) / g) * (kHidden + 16)),
                           static_cast<uint32_t>((kHidden + g - 1) / g * (kInter + 16))};
  uint32_t at = 0;
  for (int i = 0; i < 4; ++i) {
    s.smem[i] = at;
    at += (cap[i] + 127) & ~127u;
  }
  return s;
}

// Bytes of dynamic shared memory for a grid of g CTAs (MakeSlots' layout, then scratch).
// Scratch floats: scores (kMaxCtx + 4), GEMV partials / PV partials / the final norm's row
// (8 x kHeadDim), the attention's q, k and v (3 x kHeadDim), row results (64), reductions (64).
constexpr int kScoreFloats = kMaxCtx + 4;
constexpr int kScratchFloats = kScoreFloats + 8 * kHeadDim + 3 * kHeadDim + 64 + 64 + 64;

// One query head's attention for the new token (CTA == head): q/k RMSNorm (unit weights),
// RoPE at position ctx, the new key and value into the cache (the even head of each
// KV pair writes), softmax over ctx + 1 tokens, the output's FP8 codes. Modes 1-2 read
// q/k/v from p.qkv and write p.attn_codes; mode 3 polls and publishes words (fl: the
// layer's words) and reads the context from shared memory (kvs: keys, then values) when
// it was copied there.
__device__ void Attention(const Params& p, int layer, float* sc, float* part, float* red, uint64_t* fl, uint32_t tag,
                          const uint16_t* kvs) {
  const int head = blockIdx.x, kv = head / (kHeads / kKvHeads), t = threadIdx.x;
  const int warp = t >> 5, lane = t & 31, n = p.ctx + 1;
  float* q = part + 8 * kHeadDim;  // 3 x kHeadDim after the PV partials
  float* knew = q + kHeadDim;
  float* vnew = knew + kHeadDim;
  uint16_t* kc = p.k_cache + static_cast<int64_t>(layer) * kMaxCtx * kKvHeads * kHeadDim;
  uint16_t* vc = p.v_cache + static_cast<int64_t>(layer) * kMaxCtx * kKvHeads * kHeadDim;
  // Warps 0-3: q in warps 0-3 and k in 4-7 normed over their 128 values, v copied.
  if (t < 2 * kHeadDim) {
    const int d = t & (kHeadDim - 1);
    const int at = t < kHeadDim ? head * kHeadDim + d : kAttnOut + kv * kHeadDim + d;
    const float v = fl ? __uint_as_float(Poll(fl + kFlagQkv + at, tag)) : __ldcg(p.qkv + at);
    float ss = WarpSum(v * v);
    if (lane == 0) red[warp] = ss;
    asm volatile("bar.sync 1, 256;" ::: "memory");
    const int g = t < kHeadDim ? 0 : 4;
    const float r = rsqrtf((red[g] + red[g + 1] + red[g + 2] + red[g + 3]) / kHeadDim + kEps);
    (t < kHeadDim ? q : knew)[d] = v * r;
  } else if (t < 3 * kHeadDim) {
    const int at = kAttnOut + kKvHeads * kHeadDim + kv * kHeadDim + (t - 2 * kHeadDim);
    vnew[t - 2 * kHeadDim] = fl ? __uint_as_float(Poll(fl + kFlagQkv + at, tag)) : __ldcg(p.qkv + at);
  }
  __syncthreads();
  if (t < kHeadDim) {  // rotate-half RoPE on q (t < 64) and k (64 <= t < 128)
    const int d = t & 63;
    float* x = t < 64 ? q : knew;
    const float freq = powf(kRopeTheta, -2.0f * d / kHeadDim);
    float s, c;
    sincosf(static_cast<float>(p.ctx) * freq, &s, &c);
    const float a = x[d], b = x[d + 64];
    x[d] = a * c - b * s;
    x[d + 64] = b * c + a * s;
  }
  __syncthreads();
  if (head % (kHeads / kKvHeads) == 0 && t < kHeadDim) {
    const int64_t at = (static_cast<int64_t>(p.ctx) * kKvHeads + kv) * kHeadDim + t;
    kc[at] = vt::FloatToBf16(knew[t]);
    vc[at] = vt::FloatToBf16(vnew[t]);
  }
  // Scores: a warp a token, four dimensions a lane.
  const float scale = rsqrtf(static_cast<float>(kHeadDim));
  for (int j = warp; j < n; j += 32) {
    float s = 0.0f;
    if (j < p.ctx) {
      const uint2 raw = kvs ? *reinterpret_cast<const uint2*>(kvs + j * kHeadDim + lane * 4)
                            : *reinterpret_cast<const uint2*>(kc + (static_cast<int64_t>(j) * kKvHeads + kv) * kHeadDim + lane * 4);
      s = vt::Bf16ToFloat(raw.x & 0xFFFFu) * q[lane * 4] + vt::Bf16ToFloat(raw.x >> 16) * q[lane * 4 + 1] +
          vt::Bf16ToFloat(raw.y & 0xFFFFu) * q[lane * 4 + 2] + vt::Bf16ToFloat(raw.y >> 16) * q[lane * 4 + 3];
    } else {
      for (int i = 0; i < 4; ++i) s += vt::Bf16ToFloat(vt::FloatToBf16(knew[lane * 4 + i])) * q[lane * 4 + i];
    }
    s = WarpSum(s);
    if (lane == 0) sc[j] = s * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int j = t; j < n; j += kThreads) m = fmaxf(m, sc[j]);
  m = WarpMax(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  if (t < 32) {
    const float mm = WarpMax(red[t]);
    if (t == 0) red[32] = mm;
  }
  __syncthreads();
  m = red[32];
  __syncthreads();
  float l = 0.0f;
  for (int j = t; j < n; j += kThreads) {
    const float e = expf(sc[j] - m);
    sc[j] = e;
    l += e;
  }
  l = BlockSum(l, red);
  // P V: eight groups of tokens, a dimension a thread.
  const int d = t & (kHeadDim - 1), g = t >> 7;
  float acc = 0.0f;
  for (int j = g; j < n; j += 8) {
    const float v = j >= p.ctx ? vt::Bf16ToFloat(vt::FloatToBf16(vnew[d]))
                    : kvs      ? vt::Bf16ToFloat(kvs[(kKvSmemTokens + j) * kHeadDim + d])
                               : vt::Bf16ToFloat(vc[(static_cast<int64_t>(j) * kKvHeads + kv) * kHeadDim + d]);
    acc = fmaf(sc[j], v, acc);
  }
  part[g * kHeadDim + d] = acc;
  __syncthreads();
  if (t < kHeadDim) {
    float o = 0.0f;
    for (int i = 0; i < 8; ++i) o += part[i * kHeadDim + t];
    if (!fl)
      for (int r = 0; r < max(p.replicas, 1); ++r) p.attn_codes[r * kAttnOut + head * kHeadDim + t] = Code(o / l / kAttnScale);
    else reinterpret_cast<uint8_t*>(sc)[t] = Code(o / l / kAttnScale);  // the scores are spent
  }
  if (fl) {
    __syncthreads();
    if (t < kHeadDim / 4) Publish(fl + kFlagAttn + head * (kHeadDim / 4) + t, reinterpret_cast<const uint32_t*>(sc)[t], tag);
  }
}

// The BF16 lm_head over the normed row x (shared memory): a warp a row, two rows at once,
// 16 bytes a lane.
__device__ void LmHead(const Params& p, const float* x) {
  const int t = threadIdx.x;
  int v0, v1;
  Range(kVocab, v0, v1);
  const int warp = t >> 5, lane = t & 31;
  for (int r = v0 + warp; r < v1; r += 64) {
    const int r2 = r + 32;
    uint4 a[4], b[4] = {};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a[i] = vt::cuda::LoadStream16(reinterpret_cast<const uint8_t*>(p.lm_head + static_cast<int64_t>(r) * kHidden +
                                                                     i * 256 + lane * 8));
      if (r2 < v1)
        b[i] = vt::cuda::LoadStream16(reinterpret_cast<const uint8_t*>(p.lm_head + static_cast<int64_t>(r2) * kHidden +
                                                                       i * 256 + lane * 8));
    }
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t wa[4] = {a[i].x, a[i].y, a[i].z, a[i].w}, wb[4] = {b[i].x, b[i].y, b[i].z, b[i].w};
      const float* xi = x + i * 256 + lane * 8;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        sa = fmaf(vt::Bf16ToFloat(wa[k] & 0xFFFFu), xi[2 * k], sa);
        sa = fmaf(vt::Bf16ToFloat(wa[k] >> 16), xi[2 * k + 1], sa);
        sb = fmaf(vt::Bf16ToFloat(wb[k] & 0xFFFFu), xi[2 * k], sb);
        sb = fmaf(vt::Bf16ToFloat(wb[k] >> 16), xi[2 * k + 1], sb);
      }
    }
    sa = WarpSum(sa);
    sb = WarpSum(sb);
    if (lane == 0) {
      p.logits[r] = sa;
      if (r2 < v1) p.logits[r2] = sb;
    }
  }
}

// The final RMSNorm of the row (thread t holds element t) into x (kHidden floats of shared
// memory), then the lm_head over it.
__device__ void FinalNormLmHead(const Params& p, float v, float* x, float* red) {
  const float r = rsqrtf(BlockSum(v * v, red) / kHidden + kEps);
  x[threadIdx.x] = v * r * p.final_norm[threadIdx.x];
  __syncthreads();
  LmHead(p, x);
}

__global__ void __launch_bounds__(kThreads, 1) PersistentDecodeStep(Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const Slots s = MakeSlots();
  const int t = threadIdx.x, g = gridDim.x;
  uint8_t* xs = smem + s.smem[3] + ((((kHidden + g - 1) / g * (kInter + 16)) + 127) & ~127);
  float* scratch = reinterpret_cast<float*>(xs + kInter);
  float* sc = scratch;
  float* part = sc + kScoreFloats;
  float* res = part + 11 * kHeadDim;
  float* red = res + 64;
  float* own = red + 64;  // mode 3: this CTA's rows of the residual
  uint64_t* bar = reinterpret_cast<uint64_t*>(own + 64);
  uint16_t* kvs = reinterpret_cast<uint16_t*>(
      (reinterpret_cast<uintptr_t>(bar + 4) + 127) & ~uintptr_t{127});  // mode 3: keys, then values
  unsigned target = 0;
  if (t == 0) {
    for (int i = 0; i < 4; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddr(bar + i)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (p.mode == 0 || p.mode == 4) {
    for (int i = 0; i < 5 * kLayers; ++i) GridSync(p.barrier, target, p.mode == 0);
    if (p.lm_head) GridSync(p.barrier, target, p.mode == 0);
    return;
  }
  auto issue = [&](int slot, int layer) {
    if (t == 0)
      BulkCopyRows(bar + slot, smem + s.smem[slot], p.w + layer * kLayerBytes + s.offset[slot], s.rows[slot],
                   s.row_bytes[slot], s.stride[slot]);
  };
  auto slot_ready = [&](int slot, int layer) {
    if (p.mode == 1) issue(slot, layer);  // mode 2 issued it when the layer before was done with the slot
    MbarWait(bar + slot, layer & 1);
  };
  auto slot_done = [&](int slot, int layer) {  // after SmemGemv's closing barrier
    if (p.mode >= 2 && layer + 1 < kLayers) issue(slot, layer + 1);
  };
  if (p.mode >= 2)  // modes 0 and 4 returned above
    for (int i = 0; i < 4; ++i) issue(i, 0);
  auto gemv = [&](int slot) {
    if (p.mode == 5) {
      if (t < 64) res[t] = 0.0f;
      __syncthreads();
    } else if (p.mma) {
      SmemGemvMma(smem + s.smem[slot], s.stride[slot], s.rows[slot], s.row_bytes[slot], xs, part, res);
    } else {
      SmemGemv(smem + s.smem[slot], s.stride[slot], s.rows[slot], s.row_bytes[slot], xs, part, res);
    }
  };
  const int head = blockIdx.x, kv = head / (kHeads / kKvHeads);
  const bool kv_in_smem = head < kHeads && p.ctx <= kKvSmemTokens && (p.mode == 3 || p.mode == 5 || p.kv_smem);
  auto copy_context = [&](int layer) {  // the context's keys and values, 16 bytes a copy
    if (!kv_in_smem) return;
    const int64_t base = static_cast<int64_t>(layer) * kMaxCtx * kKvHeads * kHeadDim;
    for (int i = t; i < p.ctx * 32; i += kThreads) {
      const int j = i >> 5, which = (i >> 4) & 1, ch = i & 15;
      const uint16_t* src =
          (which ? p.v_cache : p.k_cache) + base + (static_cast<int64_t>(j) * kKvHeads + kv) * kHeadDim + ch * 8;
      const uint16_t* dst = kvs + (which * kKvSmemTokens + j) * kHeadDim + ch * 8;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(dst)), "l"(src) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  const int rows_o = s.o1 - s.o0, nj = s.j1 - s.j0;
  if (p.mode == 3 || p.mode == 5) {
    __shared__ uint32_t tag_shared;
    if (t == 0) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(tag_shared) : "l"(p.epoch) : "memory");
    __syncthreads();
    const uint32_t tag = tag_shared + 1;
    if (t < rows_o) own[t] = p.h_in[s.o0 + t];
    for (int layer = 0; layer < kLayers; ++layer) {
      uint64_t* fl = p.flags + static_cast<int64_t>(layer) * kFlagWords;
      const float* nw = p.norm_w + static_cast<int64_t>(layer) * 2 * kHidden;
      copy_context(layer);
      NormCodesOf(layer == 0 ? p.h_in[t] : __uint_as_float(Poll(fl + kFlagH + t, tag)), nw, 1.0f / kXScale, xs, red);
      slot_ready(0, layer);
      gemv(0);
      slot_done(0, layer);
      if (t < s.q1 - s.q0) Publish(fl + kFlagQkv + s.q0 + t, __float_as_uint(res[t] * kWScale * kXScale), tag);
      if (head < kHeads) {
        if (kv_in_smem) asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        Attention(p, layer, sc, part, red, fl, tag, kv_in_smem ? kvs : nullptr);
      }
      if (t < kAttnOut / 4) reinterpret_cast<uint32_t*>(xs)[t] = Poll(fl + kFlagAttn + t, tag);
      __syncthreads();
      slot_ready(1, layer);
      gemv(1);
      slot_done(1, layer);
      if (t < rows_o) {
        own[t] += res[t] * kWScale * kAttnScale;
        Publish(fl + kFlagMid + s.o0 + t, __float_as_uint(own[t]), tag);
      }
      NormCodesOf(__uint_as_float(Poll(fl + kFlagMid + t, tag)), nw + kHidden, 1.0f / kXScale, xs, red);
      slot_ready(2, layer);
      gemv(2);
      slot_done(2, layer);
      if (t < nj) {
        const float gate = res[t] * kWScale * kXScale, up = res[nj + t] * kWScale * kXScale;
        Publish(fl + kFlagAct + s.j0 + t, Code(gate / (1.0f + expf(-gate)) * up / kActScale), tag);
      }
      for (int i = t; i < kInter; i += kThreads) xs[i] = static_cast<uint8_t>(Poll(fl + kFlagAct + i, tag));
      __syncthreads();
      slot_ready(3, layer);
      gemv(3);
      slot_done(3, layer);
      if (t < rows_o) {
        own[t] += res[t] * kWScale * kActScale;
        Publish(fl + kFlagWords + kFlagH + s.o0 + t, __float_as_uint(own[t]), tag);
        p.h[s.o0 + t] = own[t];
      }
    }
    if (p.lm_head) FinalNormLmHead(p, __uint_as_float(Poll(p.flags + int64_t{kLayers} * kFlagWords + kFlagH + t, tag)), part, red);
    // Every CTA read the epoch before it published its first word, and CTA 0's last
    // layer needed words of every CTA: the next step can take the next tag.
    if (blockIdx.x == 0 && t == 0) atomicAdd(p.epoch, 1u);
    return;
  }
  const bool fenced = !p.light;
  const int copies = max(p.replicas, 1), copy = blockIdx.x % copies;
  // o_proj or down (slot) over this CTA's copy of its input codes (n of them, this scale),
  // added to this CTA's rows of the residual, every copy written; then the barrier.
  auto into_residual = [&](int slot, int layer, const uint8_t* codes, int n, float scale) {
    if (t < n / 16) reinterpret_cast<uint4*>(xs)[t] = __ldcg(reinterpret_cast<const uint4*>(codes + copy * n) + t);
    __syncthreads();
    slot_ready(slot, layer);
    gemv(slot);
    slot_done(slot, layer);
    if (t < rows_o) {
      own[t] += res[t] * kWScale * scale;
      for (int r = 0; r < copies; ++r) p.h[r * kHidden + s.o0 + t] = own[t];
    }
    GridSync(p.barrier, target, fenced);
  };
  if (t < rows_o) own[t] = p.h_in[s.o0 + t];
  for (int layer = 0; layer < kLayers; ++layer) {
    const float* h = layer == 0 ? p.h_in : p.h + copy * kHidden;
    const float* nw = p.norm_w + static_cast<int64_t>(layer) * 2 * kHidden;
    copy_context(layer);
    // q/k/v.
    NormCodes(h, nw, 1.0f / kXScale, xs, red);
    slot_ready(0, layer);
    gemv(0);
    slot_done(0, layer);
    if (t < s.q1 - s.q0) p.qkv[s.q0 + t] = res[t] * kWScale * kXScale;
    GridSync(p.barrier, target, fenced);
    // Attention.
    if (head < kHeads) {
      if (kv_in_smem) asm volatile("cp.async.wait_all;" ::: "memory");
      __syncthreads();
      Attention(p, layer, sc, part, red, nullptr, 0, kv_in_smem ? kvs : nullptr);
    }
    GridSync(p.barrier, target, fenced);
    // o_proj and the residual.
    into_residual(1, layer, p.attn_codes, kAttnOut, kAttnScale);
    // gate/up, SiLU-mul.
    NormCodes(p.h + copy * kHidden, nw + kHidden, 1.0f / kXScale, xs, red);
    slot_ready(2, layer);
    gemv(2);
    slot_done(2, layer);
    if (t < nj) {
      const float gate = res[t] * kWScale * kXScale, up = res[nj + t] * kWScale * kXScale;
      const uint8_t c = Code(gate / (1.0f + expf(-gate)) * up / kActScale);
      for (int r = 0; r < copies; ++r) p.act_codes[r * kInter + s.j0 + t] = c;
    }
    GridSync(p.barrier, target, fenced);
    // down and the residual.
    into_residual(3, layer, p.act_codes, kInter, kActScale);
  }
  if (p.lm_head) FinalNormLmHead(p, __ldcg(p.h + t), part, red);
}

// Deterministic fills on the device: FP8 codes with |w| < 2 (bit 6 clear: no NaN code),
// BF16 and f32 values in [-1, 1).
__device__ __forceinline__ uint32_t Hash(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x >> 16);
}
__global__ void FillCodes(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint8_t>(Hash(i, seed) & 0xBFu);
}
__global__ void FillBf16(uint16_t* p, int64_t n, uint32_t seed, float amp) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = vt::FloatToBf16(amp * ((Hash(i, seed) & 0xFFFFu) / 32768.0f - 1.0f));
}
__global__ void FillF32(float* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = lo + (hi - lo) * ((Hash(i, seed) & 0xFFFFu) / 65536.0f);
}

}  // namespace

size_t SmemBytes(int g) {
  const uint32_t cap[4] = {static_cast<uint32_t>((kQkv + g - 1) / g * (kHidden + 16)),
                           static_cast<uint32_t>((kHidden + g - 1) / g * (kAttnOut + 16)),
                           static_cast<uint32_t>(2 * ((kInter + g - 1) / g) * (kHidden + 16)),
                           static_cast<uint32_t>((kHidden + g - 1) / g * (kInter + 16))};
  size_t at = 0;
  for (uint32_t c : cap) at += (c + 127) & ~127u;
  at += kInter + kScratchFloats * sizeof(float) + 4 * sizeof(uint64_t);
  at = (at + 127) & ~size_t{127};
  return at + size_t{2} * kKvSmemTokens * kHeadDim * sizeof(uint16_t) + 128;
}

cudaError_t ConfigurePersistentStep(size_t smem, int* per_sm) {
  cudaError_t e = cudaFuncSetAttribute(PersistentDecodeStep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  return e != cudaSuccess ? e : cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, PersistentDecodeStep, kThreads, smem);
}

cudaError_t LaunchPersistentStep(const Params& p, int grid, size_t smem, bool cooperative, cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cooperative ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, PersistentDecodeStep, p);
}

cudaError_t FillPersistentInputs(const Params& p, int64_t w_bytes, int64_t cache_elems) {
  FillCodes<<<1024, 256>>>(const_cast<uint8_t*>(p.w), w_bytes, 1);
  FillF32<<<64, 256>>>(const_cast<float*>(p.norm_w), kLayers * 2 * kHidden, 2, 0.5f, 1.5f);
  FillF32<<<4, 256>>>(const_cast<float*>(p.final_norm), kHidden, 3, 0.5f, 1.5f);
  FillF32<<<4, 256>>>(const_cast<float*>(p.h_in), kHidden, 4, -1.0f, 1.0f);
  FillBf16<<<1024, 256>>>(p.k_cache, cache_elems, 5, 1.0f);
  FillBf16<<<1024, 256>>>(p.v_cache, cache_elems, 6, 1.0f);
  FillBf16<<<1024, 256>>>(const_cast<uint16_t*>(p.lm_head), int64_t{kVocab} * kHidden, 7, 0.05f);
  cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

}  // namespace persistent_floor
