// CUDA Gated DeltaNet ops (vt/ops/gdn.h): CausalConv1d and GatedDeltaRule.
//
// CausalConv1d: the same f32 sum in the same order as the CPU definition (j = 0 .. Kw - 1,
// no fused multiply-add), so outputs and states match the CPU's byte for byte except where
// Silu's exp differs in the last bit. A step whose sequences bring one token each (decode)
// takes one thread per (sequence, channel), which keeps the channel's Kw - 1 history values
// in registers. A step with longer sequences (T > S) takes one thread per (channel, tile of
// kConvTokens tokens), each output reading its Kw inputs from x or, before the sequence's
// first token, from the state; a second launch then shifts each sequence's last Kw - 1
// inputs into its state (the first read the old state, so the two cannot share a launch).
//
// GatedDeltaRule, for dk = 128, dv a multiple of kDrCols and q, k, v, a, b of one dtype
// (BF16 or F32): one CTA per (sequence, value head, kDrCols columns of the state). Column j
// of the state evolves on its own (kv_j = S[:, j]·k, o_j = S[:, j]·q), so a head's columns
// split across CTAs with no exchange: 8 lanes of a warp hold one column's 128 rows in
// registers (16 each), and every sum over dk is a 16-term chain per lane and a 3-step
// shuffle tree; no shared memory, no barrier. The next token's inputs load while the
// current one computes. In a step where some sequence brings several tokens, the sequences
// of gdn::kChunkedMinTokens or more go instead to the chunked kernel of gdn_chunked.cu (the
// same math in chunks of 64 tokens, f32 throughout; VT_CUDA_GDN_CHUNKED=0 turns it off).
// Other head sizes (or mixed dtypes) take one CTA per (sequence, value head) with the state
// in shared memory, thread j owning column j. q and k are L2-normalised per token. The op's
// chunk_size does not pick the form here: both forms are the same math, and the op's
// contract allows the f32 rounding difference.
//
// The batch metadata lives on the device: each kernel checks what it reads and records the
// first inconsistency in the device's index-error record (device_error.h), skipping the
// sequence; two sequences naming one slot are not detected on CUDA.
#include <atomic>
#include <cmath>

#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/gdn_common.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/gdn.h"

namespace vt::cuda {

namespace {

using gdn::GdnArgs;
using gdn::GdnSeq;
using gdn::ReadGdnSeq;
using gdn::Softplus;

std::atomic<int64_t> g_conv_token_launches{0}, g_delta_rule_column_launches{0}, g_delta_rule_chunked_launches{0};

constexpr int kMaxConvWidth = 16;

template <typename Tag>
__global__ void CausalConv1dKernel(typename Tag::T* out, const typename Tag::T* x, const void* weight, DType wd,
                                   typename Tag::T* conv_state,
                                   const int32_t* qs, const int32_t* slots, int64_t S, int64_t T, int64_t C, int Kw,
                                   int64_t num_slots, IndexErrorRecord* err) {
  PdlWait();
  const int64_t s = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const GdnSeq q = ReadGdnSeq(qs, slots, s, S, T, num_slots, blockIdx.x == 0 && threadIdx.x == 0, err);
  if (c >= C || !q.range_ok) return;
  if (q.slot < 0) {
    for (int64_t t = q.t0; t < q.t1; ++t) out[t * C + c] = Tag::Store(0.0f);
    return;
  }
  float w[kMaxConvWidth], hist[kMaxConvWidth];
  for (int j = 0; j < Kw; ++j) w[j] = LoadAny(weight, wd, c * Kw + j);
  typename Tag::T* st = conv_state + (static_cast<int64_t>(q.slot) * C + c) * (Kw - 1);
  for (int j = 0; j < Kw - 1; ++j) hist[j] = Tag::Load(st[j]);
  for (int64_t t = q.t0; t < q.t1; ++t) {
    const float xt = Tag::Load(x[t * C + c]);
    float y = 0.0f;
    for (int j = 0; j < Kw - 1; ++j) y = __fadd_rn(y, __fmul_rn(w[j], hist[j]));
    y = __fadd_rn(y, __fmul_rn(w[Kw - 1], xt));
    out[t * C + c] = Tag::Store(numerics::Silu(y));
    for (int j = 0; j + 1 < Kw - 1; ++j) hist[j] = hist[j + 1];
    hist[Kw - 2] = xt;
  }
  for (int j = 0; j < Kw - 1; ++j) st[j] = Tag::Store(hist[j]);
}

constexpr int kConvTokens = 16;

// The sequence holding token t: the last s with qs[s] <= t (qs ascending when valid; a
// corrupt qs gives some s whose range check below fails or holds, never an access outside).
__device__ __forceinline__ int64_t SequenceOf(const int32_t* qs, int64_t S, int64_t t) {
  int64_t lo = 0, hi = S - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (qs[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// grid (channel blocks, token tiles): outputs only; the state is read, not written. kKw:
// the kernel width when known at compile time (the models' 4: the weights stay in
// registers), else 0 and Kw.
template <typename Tag, int kKw>
__global__ void CausalConv1dTokensKernel(typename Tag::T* out, const typename Tag::T* x, const void* weight,
                                         DType wd, const typename Tag::T* conv_state, const int32_t* qs,
                                         const int32_t* slots, int64_t S, int64_t T, int64_t C, int Kw_arg,
                                         int64_t num_slots) {
  PdlWait();
  const int Kw = kKw > 0 ? kKw : Kw_arg;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t tb = static_cast<int64_t>(blockIdx.y) * kConvTokens, te = min(tb + kConvTokens, T);
  if (c >= C) return;
  float w[kKw > 0 ? kKw : kMaxConvWidth];
#pragma unroll
  for (int j = 0; j < Kw; ++j) w[j] = LoadAny(weight, wd, c * Kw + j);
  int64_t s = SequenceOf(qs, S, tb);
  GdnSeq q = ReadGdnSeq(qs, slots, s, S, T, num_slots, false, nullptr);
  for (int64_t t = tb; t < te; ++t) {
    while (s + 1 < S && t >= q.t1 && q.t1 >= q.t0) q = ReadGdnSeq(qs, slots, ++s, S, T, num_slots, false, nullptr);
    if (!q.range_ok || t < q.t0 || t >= q.t1) continue;  // reported by the state kernel
    if (q.slot < 0) {
      out[t * C + c] = Tag::Store(0.0f);
      continue;
    }
    const typename Tag::T* st = conv_state + (static_cast<int64_t>(q.slot) * C + c) * (Kw - 1);
    float y = 0.0f;
#pragma unroll
    for (int j = 0; j < Kw; ++j) {  // input u = t - (Kw - 1) + j; before t0 it is state entry u - t0 + Kw - 1
      const int64_t u = t - (Kw - 1) + j;
      const float v = u >= q.t0 ? Tag::Load(x[u * C + c]) : Tag::Load(st[u - q.t0 + Kw - 1]);
      y = __fadd_rn(y, __fmul_rn(w[j], v));
    }
    out[t * C + c] = Tag::Store(numerics::Silu(y));
  }
}

// grid (channel blocks, S): each sequence's state becomes its last Kw - 1 inputs; entry j
// is input t1 - (Kw - 1) + j, or old entry j + n for a sequence of n < Kw - 1 - j tokens
// (read ahead of the write, ascending j).
template <typename Tag>
__global__ void CausalConv1dStateKernel(const typename Tag::T* x, typename Tag::T* conv_state, const int32_t* qs,
                                        const int32_t* slots, int64_t S, int64_t T, int64_t C, int Kw,
                                        int64_t num_slots, IndexErrorRecord* err) {
  PdlWait();
  const int64_t s = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const GdnSeq q = ReadGdnSeq(qs, slots, s, S, T, num_slots, blockIdx.x == 0 && threadIdx.x == 0, err);
  if (c >= C || !q.range_ok || q.slot < 0) return;
  const int64_t n = q.t1 - q.t0;
  if (n == 0) return;
  typename Tag::T* st = conv_state + (static_cast<int64_t>(q.slot) * C + c) * (Kw - 1);
  for (int j = 0; j < Kw - 1; ++j) {
    const int64_t u = q.t1 - (Kw - 1) + j;
    st[j] = u >= q.t0 ? x[u * C + c] : st[j + n];
  }
}

// A fixed-order sum over the CTA (blockDim.x a multiple of 32, <= 1024); red: 32 floats.
__device__ __forceinline__ float BlockSum(float v, float* red) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // red may still be read from the last call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < warps ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o /= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

// grid (nv, S); dynamic shared memory: S [dk * dv], q [dk], k [dk], 32 reduction floats.
__global__ void GatedDeltaRuleKernel(GdnArgs g) {
  PdlWait();
  extern __shared__ float smem[];
  const int64_t h = blockIdx.x, s = blockIdx.y, dk = g.dk, dv = g.dv;
  const GdnSeq seq = ReadGdnSeq(g.qs, g.slots, s, g.S, g.T, g.num_slots, h == 0 && threadIdx.x == 0, g.err);
  if (!seq.range_ok) return;
  if (seq.slot < 0) {
    for (int64_t t = seq.t0; t < seq.t1; ++t)
      for (int64_t j = threadIdx.x; j < dv; j += blockDim.x) StoreAny(g.out, g.od, (t * g.nv + h) * dv + j, 0.0f);
    return;
  }
  if (seq.t1 == seq.t0) return;
  float* Sm = smem;
  float* qv = Sm + dk * dv;
  float* kv = qv + dk;
  float* red = kv + dk;
  float* Sg = g.state + (static_cast<int64_t>(seq.slot) * g.nv + h) * dk * dv;
  for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) Sm[e] = Sg[e];
  const int64_t kh = h / (g.nv / g.nk);
  const float A = -expf(LoadAny(g.A_log, g.Ad, h));
  const float bias = LoadAny(g.dt_bias, g.dtd, h);
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int64_t t = seq.t0; t < seq.t1; ++t) {
    float sq = 0.0f, sk = 0.0f;
    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
      const float qi = LoadAny(g.query, g.qd, (t * g.nk + kh) * dk + i);
      const float ki = LoadAny(g.key, g.kd, (t * g.nk + kh) * dk + i);
      qv[i] = qi;
      kv[i] = ki;
      sq += qi * qi;
      sk += ki * ki;
    }
    const float qinv = 1.0f / sqrtf(BlockSum(sq, red) + 1e-6f);
    const float kinv = 1.0f / sqrtf(BlockSum(sk, red) + 1e-6f);
    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
      qv[i] = qv[i] * qinv * qscale;
      kv[i] = kv[i] * kinv;
    }
    __syncthreads();
    const float decay = expf(A * Softplus(LoadAny(g.a, g.ad, t * g.nv + h) + bias));
    const float beta = 1.0f / (1.0f + expf(-LoadAny(g.b, g.bd, t * g.nv + h)));
    for (int64_t j = threadIdx.x; j < dv; j += blockDim.x) {
      float kvj = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        const float v = Sm[i * dv + j] * decay;
        Sm[i * dv + j] = v;
        kvj = fmaf(v, kv[i], kvj);
      }
      const float delta = (LoadAny(g.value, g.vd, (t * g.nv + h) * dv + j) - kvj) * beta;
      float o = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        const float v = fmaf(kv[i], delta, Sm[i * dv + j]);
        Sm[i * dv + j] = v;
        o = fmaf(v, qv[i], o);
      }
      StoreAny(g.out, g.od, (t * g.nv + h) * dv + j, o);
    }
    __syncthreads();  // qv/kv are rewritten for the next token
  }
  for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) Sg[e] = Sm[e];
}

// The column-split delta rule: dk = kDrRows * kDrLanes = 128; a warp holds 32 / kDrLanes
// columns, kDrLanes lanes per column (lane % kDrLanes picks the 16 rows).
constexpr int kDrDk = 128, kDrLanes = 8, kDrRows = kDrDk / kDrLanes, kDrThreads = 128;
constexpr int kDrCols = kDrThreads / kDrLanes;

__device__ __forceinline__ float LaneGroupSum(float v) {  // over the kDrLanes lanes of a column
#pragma unroll
  for (int o = 1; o < kDrLanes; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One token's inputs for one lane: its 16 rows of q and k, the column's v, and the head's a, b.
struct DrToken {
  float q[kDrRows], k[kDrRows];
  float v, a, b;
};

// Tag: the element type of q, k, v, a and b, known at compile time so that the 35 loads
// are straight-line code issued back to back (behind a dtype switch each would wait for
// the one before it).
template <typename Tag>
__device__ __forceinline__ void LoadDrToken(DrToken& in, const GdnArgs& g, int64_t t, int64_t kh, int64_t h,
                                            int64_t row0, int64_t j) {
  using T = typename Tag::T;
  const T* q = static_cast<const T*>(g.query) + (t * g.nk + kh) * kDrDk + row0;
  const T* k = static_cast<const T*>(g.key) + (t * g.nk + kh) * kDrDk + row0;
#pragma unroll
  for (int r = 0; r < kDrRows; ++r) {
    in.q[r] = Tag::Load(q[r]);
    in.k[r] = Tag::Load(k[r]);
  }
  in.v = Tag::Load(static_cast<const T*>(g.value)[(t * g.nv + h) * g.dv + j]);
  in.a = Tag::Load(static_cast<const T*>(g.a)[t * g.nv + h]);
  in.b = Tag::Load(static_cast<const T*>(g.b)[t * g.nv + h]);
}

// grid (nv * dv / kDrCols, S), kDrThreads threads.
template <typename Tag>
__global__ void __launch_bounds__(kDrThreads) GatedDeltaRuleColumnsKernel(GdnArgs g) {
  PdlWait();
  const int64_t col_blocks = g.dv / kDrCols;
  const int64_t h = blockIdx.x / col_blocks, s = blockIdx.y;
  const int64_t j = (blockIdx.x % col_blocks) * kDrCols + threadIdx.x / kDrLanes;
  const int64_t row0 = static_cast<int64_t>(threadIdx.x % kDrLanes) * kDrRows;
  const bool writer = threadIdx.x % kDrLanes == 0;
  const GdnSeq seq = ReadGdnSeq(g.qs, g.slots, s, g.S, g.T, g.num_slots, blockIdx.x == 0 && threadIdx.x == 0, g.err);
  if (!seq.range_ok || seq.t1 - seq.t0 >= g.chunked_min) return;  // the chunked kernel's
  if (seq.slot < 0) {
    if (writer)
      for (int64_t t = seq.t0; t < seq.t1; ++t) StoreAny(g.out, g.od, (t * g.nv + h) * g.dv + j, 0.0f);
    return;
  }
  if (seq.t1 == seq.t0) return;
  float* Sg = g.state + (static_cast<int64_t>(seq.slot) * g.nv + h) * kDrDk * g.dv;
  float st[kDrRows];
#pragma unroll
  for (int r = 0; r < kDrRows; ++r) st[r] = Sg[(row0 + r) * g.dv + j];
  const int64_t kh = h / (g.nv / g.nk);
  const float A = -expf(LoadAny(g.A_log, g.Ad, h));
  const float bias = LoadAny(g.dt_bias, g.dtd, h);
  const float qscale = 1.0f / sqrtf(static_cast<float>(kDrDk));
  DrToken cur{}, next{};
  LoadDrToken<Tag>(cur, g, seq.t0, kh, h, row0, j);
  for (int64_t t = seq.t0; t < seq.t1; ++t) {
    if (t + 1 < seq.t1) LoadDrToken<Tag>(next, g, t + 1, kh, h, row0, j);
    float sq = 0.0f, sk = 0.0f;
#pragma unroll
    for (int r = 0; r < kDrRows; ++r) {
      sq = fmaf(cur.q[r], cur.q[r], sq);
      sk = fmaf(cur.k[r], cur.k[r], sk);
    }
    const float qinv = qscale / sqrtf(LaneGroupSum(sq) + 1e-6f);
    const float kinv = 1.0f / sqrtf(LaneGroupSum(sk) + 1e-6f);
    const float decay = expf(A * Softplus(cur.a + bias));
    const float beta = 1.0f / (1.0f + expf(-cur.b));
    float kv = 0.0f;
#pragma unroll
    for (int r = 0; r < kDrRows; ++r) {
      st[r] *= decay;
      kv = fmaf(st[r], cur.k[r] * kinv, kv);
    }
    const float delta = (cur.v - LaneGroupSum(kv)) * beta;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kDrRows; ++r) {
      st[r] = fmaf(cur.k[r] * kinv, delta, st[r]);
      o = fmaf(st[r], cur.q[r] * qinv, o);
    }
    o = LaneGroupSum(o);
    if (writer) StoreAny(g.out, g.od, (t * g.nv + h) * g.dv + j, o);
    cur = next;
  }
#pragma unroll
  for (int r = 0; r < kDrRows; ++r) Sg[(row0 + r) * g.dv + j] = st[r];
}

void CausalConv1dCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight,
                      const Tensor& conv_state, const Tensor& query_start, const Tensor& state_slots) {
  CudaQueue& cq = Cuda(q);
  const int64_t T = x.dim(0), C = x.dim(1), Kw = weight.dim(1), S = state_slots.dim(0);
  VT_CHECK(Kw <= kMaxConvWidth, "CausalConv1d on cuda: kernel width ", Kw, " exceeds the supported ", kMaxConvWidth);
  if (S == 0 || C == 0) return;
  VT_CHECK(S < 65536, "CausalConv1d on cuda: ", S, " sequences exceed the grid's 65535");
  DeviceGuard guard(cq.device.index);
  constexpr int kThreads = 128;
  const unsigned channel_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  const bool by_tokens = T > S;  // some sequence brings several tokens
  if (by_tokens) g_conv_token_launches.fetch_add(1, std::memory_order_relaxed);
  VT_CHECK(!by_tokens || (T + kConvTokens - 1) / kConvTokens < 65536, "CausalConv1d on cuda: ", T,
           " tokens exceed the grid's 65535 tiles of ", kConvTokens);
  DispatchFloat(x.dtype(), "CausalConv1d", [&](auto tag) {
    using Tag = decltype(tag);
    using XT = typename Tag::T;
    XT* st = static_cast<XT*>(conv_state.data());
    const XT* xs = static_cast<const XT*>(x.data());
    const int32_t* qs = query_start.data_as<int32_t>();
    const int32_t* sl = state_slots.data_as<int32_t>();
    if (!by_tokens) {
      LaunchOverlapped(cq, "CausalConv1dKernel", CausalConv1dKernel<Tag>,
                       dim3(channel_blocks, static_cast<unsigned>(S)), kThreads, 0, static_cast<XT*>(out.data()), xs,
                       weight.data(), weight.dtype(), st, qs, sl, S, T, C, static_cast<int>(Kw), conv_state.dim(0),
                       cq.index_errors);
      return;
    }
    const unsigned tiles = static_cast<unsigned>((T + kConvTokens - 1) / kConvTokens);
    const auto kernel = Kw == 4 ? CausalConv1dTokensKernel<Tag, 4> : CausalConv1dTokensKernel<Tag, 0>;
    LaunchOverlapped(cq, "CausalConv1dTokensKernel", kernel, dim3(channel_blocks, tiles),
                     kThreads, 0, static_cast<XT*>(out.data()), xs, weight.data(), weight.dtype(),
                     static_cast<const XT*>(st), qs, sl, S, T, C, static_cast<int>(Kw), conv_state.dim(0));
    LaunchOverlapped(cq, "CausalConv1dStateKernel", CausalConv1dStateKernel<Tag>,
                     dim3(channel_blocks, static_cast<unsigned>(S)), kThreads, 0, xs, st, qs, sl, S, T, C,
                     static_cast<int>(Kw), conv_state.dim(0), cq.index_errors);
  });
}

void GatedDeltaRuleCuda(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key,
                        const Tensor& value, const Tensor& a, const Tensor& b, const Tensor& A_log,
                        const Tensor& dt_bias, const Tensor& state, const Tensor& query_start,
                        const Tensor& state_slots, int /*chunk_size: see the file comment*/) {
  CudaQueue& cq = Cuda(q);
  GdnArgs g{};
  g.out = out.data();
  g.query = query.data();
  g.key = key.data();
  g.value = value.data();
  g.a = a.data();
  g.b = b.data();
  g.A_log = A_log.data();
  g.dt_bias = dt_bias.data();
  g.qd = query.dtype();
  g.kd = key.dtype();
  g.vd = value.dtype();
  g.ad = a.dtype();
  g.bd = b.dtype();
  g.Ad = A_log.dtype();
  g.dtd = dt_bias.dtype();
  g.od = out.dtype();
  g.state = state.data_as<float>();
  g.qs = query_start.data_as<int32_t>();
  g.slots = state_slots.data_as<int32_t>();
  g.S = state_slots.dim(0);
  g.T = query.dim(0);
  g.nk = query.dim(1);
  g.dk = query.dim(2);
  g.nv = value.dim(1);
  g.dv = value.dim(2);
  g.num_slots = state.dim(0);
  g.err = cq.index_errors;
  g.chunked_min = INT64_MAX;
  if (g.S == 0 || g.nv == 0) return;
  VT_CHECK(g.S < 65536, "GatedDeltaRule on cuda: ", g.S, " sequences exceed the grid's 65535");
  DeviceGuard guard(cq.device.index);
  const bool one_dtype = g.kd == g.qd && g.vd == g.qd && g.ad == g.qd && g.bd == g.qd &&
                         (g.qd == DType::kBF16 || g.qd == DType::kF32);
  if (one_dtype && g.dk == kDrDk && g.dv % kDrCols == 0 && g.nv * (g.dv / kDrCols) < (int64_t{1} << 31)) {
    g_delta_rule_column_launches.fetch_add(1, std::memory_order_relaxed);
    const auto kernel = g.qd == DType::kBF16 ? GatedDeltaRuleColumnsKernel<Bf16> : GatedDeltaRuleColumnsKernel<F32>;
    // A step where some sequence brings several tokens (T > S) also launches the chunked
    // kernel, which takes the sequences of gdn::kChunkedMinTokens or more.
    static const bool chunked_on = SwitchOn("VT_CUDA_GDN_CHUNKED");
    const bool chunked = chunked_on && g.T > g.S && g.dv % gdn::kChunkCols == 0;
    g.chunked_min = chunked ? gdn::kChunkedMinTokens : INT64_MAX;
    LaunchOverlapped(cq, "GatedDeltaRuleColumnsKernel", kernel,
                     dim3(static_cast<unsigned>(g.nv * (g.dv / kDrCols)), static_cast<unsigned>(g.S)), kDrThreads, 0,
                     g);
    if (chunked) {
      g_delta_rule_chunked_launches.fetch_add(1, std::memory_order_relaxed);
      gdn::LaunchGatedDeltaRuleChunked(cq, g);
    }
    return;
  }
  const size_t smem = static_cast<size_t>(g.dk * g.dv + 2 * g.dk + 32) * sizeof(float);
  VT_CHECK(smem <= (size_t{227} << 10), "GatedDeltaRule on cuda: a head's state of ", g.dk, " x ", g.dv,
           " floats does not fit in shared memory");
  if (smem > (size_t{48} << 10))
    VT_CUDA_CHECK(cudaFuncSetAttribute(GatedDeltaRuleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  const int64_t threads = std::min<int64_t>(256, std::max<int64_t>(32, (g.dv + 31) / 32 * 32));
  LaunchOverlapped(cq, "GatedDeltaRuleKernel", GatedDeltaRuleKernel,
                   dim3(static_cast<unsigned>(g.nv), static_cast<unsigned>(g.S)), static_cast<unsigned>(threads),
                   smem, g);
}

}  // namespace

int64_t CausalConv1dTokenLaunches() { return g_conv_token_launches.load(std::memory_order_relaxed); }
int64_t GatedDeltaRuleColumnLaunches() { return g_delta_rule_column_launches.load(std::memory_order_relaxed); }
int64_t GatedDeltaRuleChunkedLaunches() { return g_delta_rule_chunked_launches.load(std::memory_order_relaxed); }

void RegisterGdnKernels() {
  Register<OpId::kCausalConv1d>(DeviceType::kCUDA, &CausalConv1dCuda);
  Register<OpId::kGatedDeltaRule>(DeviceType::kCUDA, &GatedDeltaRuleCuda);
}

}  // namespace vt::cuda
