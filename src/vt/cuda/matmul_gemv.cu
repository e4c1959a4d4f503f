// CUDA MatmulFp8 and BF16 Matmul for one row of a (decode, M = 1) and long rows (FP8:
// kGemvMinK <= K <= kGemvMaxK; BF16: kBf16GemvMinK <= K <= kBf16GemvMaxK): a persistent
// weight-streaming kernel, the same for both but for the decode of a 16-byte vector (16
// e4m3 or 8 BF16 values, both exact in f32).
//
// The grid is one wave (SMs x resident CTAs per SM); CTA c owns the contiguous rows
// [N·c/G, N·(c+1)/G) of the weight b [N, K], so every CTA streams an equal, contiguous
// share and all finish together. Its T threads split K: thread t owns the 16-byte vectors
// t, t+T, ... (U of them) of every row, and converts its slice of a to floats once.
// Rows go in groups of RB; the loads of the next group are issued before the current
// group is computed (register double buffering), so the weight stream never waits on
// arithmetic or on the per-group reduction. Products accumulate in f32 with fma in a fixed
// order; each warp combines its lanes with xor shuffles, and the 8 warp partials are
// summed in warp order (deterministic); alpha and bias are applied once at the end.
//
// Launched overlapped (programmatic dependent launch, see GemvLaunch), a CTA of a weight
// marked read-only loads its first group of rows before it waits for the previous kernel,
// so the weight stream starts during that kernel's tail.
//
// The weights go straight from global memory into registers rather than into shared
// memory by bulk copies (cp.async.bulk): each SM's bulk copies run too slowly to keep up
// with the register stream, and more, smaller copies do not help. bench/kernel_notes.md
// has the measurements of this kernel, of its launch modes and of the bulk-copy variant.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/matmul.h"

namespace vt::cuda {

namespace {

// The element types of a and b: how many values a 16-byte vector holds and their exact
// widening to f32.
struct Fp8Rows {
  static constexpr int kElems = 16;
  __device__ __forceinline__ static void Decode(const uint4 v, float (&f)[kElems]) { Fp8x16ToFloat(v, f); }
};
struct Bf16Rows {
  static constexpr int kElems = 8;
  __device__ __forceinline__ static void Decode(const uint4 v, float (&f)[kElems]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
};

// The activation row (GemvAct) and how thread t's vectors of it widen to floats, Rows::kElems
// values per 16-byte weight vector, and whether each vector's products carry a scale.
struct GemvAct {
  const void* a;  // the row in b's element type
  // ActGroupScaled (MatmulFp8GroupScaled): a's group scales [G], b's [ceil(N / 2^bn_shift), G],
  // groups of block_k columns.
  const float* a_scales = nullptr;
  const float* b_scales = nullptr;
  int bn_shift = 0, block_k = 0, groups = 0;
};

// The row holds values of b's element type: widened exactly; the products are summed as they are.
template <typename Rows>
struct ActCodes {
  static constexpr bool kScaled = false;
  __device__ __forceinline__ static void Load(const GemvAct& p, int v, bool, float (&f)[Rows::kElems]) {
    Rows::Decode(__ldg(static_cast<const uint4*>(p.a) + v), f);
  }
};

// The same codes, and the products of each 16-byte vector (inside one group of block_k
// columns, block_k a multiple of 16 or the whole row) summed, times its group's two scales,
// then added to the row's sum: MatmulFp8GroupScaled's product in another order of the
// same f32 sums.
template <typename Rows>
struct ActGroupScaled : ActCodes<Rows> {
  static constexpr bool kScaled = true;
  __device__ __forceinline__ static int GroupOf(const GemvAct& p, int v) { return v * Rows::kElems / p.block_k; }
  __device__ __forceinline__ static float WeightScale(const GemvAct& p, int row, int group) {
    return __ldg(p.b_scales + static_cast<size_t>(row >> p.bn_shift) * p.groups + group);
  }
};

// Where the products go (GemvOut) and which weight rows a CTA takes: OutRows writes row n's
// alpha * sum (+ bias) rounded to od at out[n]; OutSiluMulQuant takes b as [gate | up] (2I
// rows) in pairs, gate row i with up row I + i, and writes e4m3 code i of
// SiluMulQuantFp8 of the two products rounded to BF16 (so MatmulFp8 into BF16 then
// SiluMulQuantFp8, byte for byte: SiluMulKernel's arithmetic).
struct GemvOut {
  void* out;  // OutSiluMulQuant: the BF16 [gate | up] products
  DType od;
  const void* bias;
  DType bd;
  float alpha;
  float inv;      // OutSiluMulQuant: 1 / input_scale of the codes
  uint8_t* out8;  // OutSiluMulQuant: the codes
};

struct OutRows {
  static constexpr bool kPairs = false;
  template <int RB>
  __device__ __forceinline__ static void Store(const GemvOut& o, const float (&s)[RB], int tid, int g, int u1, int) {
    if (g + tid >= u1) return;
    float v = o.alpha * s[tid];
    if (o.bias != nullptr) v = v + LoadAny(o.bias, o.bd, g + tid);
    if (o.od == DType::kF32)
      static_cast<float*>(o.out)[g + tid] = v;
    else
      static_cast<uint16_t*>(o.out)[g + tid] = FloatToBf16(v);
  }
};

struct OutSiluMulQuant {
  static constexpr bool kPairs = true;
  template <int RB>
  __device__ __forceinline__ static void Store(const GemvOut& o, const float (&s)[RB], int tid, int g, int u1,
                                               int half_rows) {
    constexpr int kHalf = RB / 2;
    if (tid >= kHalf || g + tid >= u1) return;
    const uint16_t gate16 = FloatToBf16(o.alpha * s[tid]), up16 = FloatToBf16(o.alpha * s[tid + kHalf]);
    uint16_t* gate_up = static_cast<uint16_t*>(o.out);
    gate_up[g + tid] = gate16;
    gate_up[half_rows + g + tid] = up16;
    const float y = numerics::Silu(Bf16ToFloat(gate16)) * Bf16ToFloat(up16);
    o.out8[g + tid] = QuantizeFp8KeepNan(RoundAny(DType::kBF16, y), o.inv);
  }
};

// Weight row of slot r of the group starting at unit g: rows g.. (OutRows), or gate rows
// g, g+1, .. then their up rows I + g, .. (pairs; I = half the rows).
template <typename Out, int RB>
__device__ __forceinline__ int RowOfSlot(int g, int r, int half_rows) {
  if constexpr (Out::kPairs)
    return r < RB / 2 ? g + r : half_rows + g + r - RB / 2;
  else
    return g + r;
}
template <typename Out, int RB>
__device__ __forceinline__ bool SlotValid(int g, int r, int u1) {
  if constexpr (Out::kPairs)
    return g + r % (RB / 2) < u1;
  else
    return g + r < u1;
}

template <typename Out, int T, int U, int RB>
__device__ __forceinline__ void LoadGroup(uint4 (&w)[U][RB], const uint8_t* __restrict__ b, int g, int u1, int tid,
                                          int kv, size_t row_bytes, int half_rows) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const int v = tid + u * T;
      const size_t row = static_cast<size_t>(RowOfSlot<Out, RB>(g, r, half_rows));
      w[u][r] = (SlotValid<Out, RB>(g, r, u1) && v < kv)
                    ? LoadStream16(b + row * row_bytes + static_cast<size_t>(v) * 16)
                    : make_uint4(0, 0, 0, 0);
    }
}

// CTAs per SM the register budget must allow for the one-vector tunings: 1024 threads per
// SM (64 registers a thread) for CTAs of up to 512 threads, so that a full SM's worth of
// threads keeps loads in flight; a tuning over that budget runs fewer CTAs per SM and
// streams more slowly (bench/kernel_notes.md).
constexpr int MinCtasPerSm(int threads, int vectors) { return vectors == 1 && threads <= 512 ? 1024 / threads : 1; }

// Launch modes (GemvLaunch): overlap 0/1, prefetch_bytes of L2 prefetch, early 0/1. K in
// elements of Rows.
// A CTA owns the units [r0, r1): rows of b, or (Out::kPairs) gate/up row pairs.
template <typename Rows, typename Act, typename Out, int T, int U, int RB>
__global__ void __launch_bounds__(T, MinCtasPerSm(T, U))
    GemvKernel(const GemvAct act, const uint8_t* __restrict__ b, const GemvOut o, int N, int K, int overlap,
               uint32_t prefetch_bytes, int early) {
  constexpr int kWarps = T / 32, kE = Rows::kElems;
  constexpr int kStep = Out::kPairs ? RB / 2 : RB;  // units per group of RB rows
  __shared__ float part[2][kWarps][RB];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int kv = K / kE;
  const size_t row_bytes = static_cast<size_t>(kv) * 16;
  const int units = Out::kPairs ? N / 2 : N, half_rows = N / 2;
  const int r0 = static_cast<int>(static_cast<int64_t>(units) * blockIdx.x / gridDim.x);
  const int r1 = static_cast<int>(static_cast<int64_t>(units) * (blockIdx.x + 1) / gridDim.x);
  if (r0 >= r1) return;  // uniform across the CTA

  uint4 cur[U][RB], nxt[U][RB];
  bool loaded = false;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (overlap) {
    // Overlapped launch (programmatic dependent launch): this CTA may run while the previous
    // kernel in the stream still does. It may pull the head of its weight share into L2
    // (coherent, so a weight the previous kernel writes is still read correctly) or, for a
    // read-only weight, load its first group of rows into registers; then it lets the next
    // kernel launch early too. Everything else (a, the other weight loads, out) waits for
    // the previous kernel's completion at griddepcontrol.wait.
    if (prefetch_bytes > 0 && tid == 0) {
      const size_t share = static_cast<size_t>(r1 - r0) * row_bytes;
      const uint32_t n = static_cast<uint32_t>(share < prefetch_bytes ? share : prefetch_bytes) & ~15u;
      if (n > 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b + static_cast<size_t>(r0) * row_bytes), "r"(n)
                     : "memory");
    }
    if (early) {
      LoadGroup<Out, T, U, RB>(cur, b, r0, r1, tid, kv, row_bytes, half_rows);
      loaded = true;
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif

  if (!loaded) LoadGroup<Out, T, U, RB>(cur, b, r0, r1, tid, kv, row_bytes, half_rows);
  float af[U][kE];
  float a_scale[U];  // Act::kScaled: the scale of the vector's group of a
  int group[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int v = tid + u * T;
    a_scale[u] = 0.0f;
    group[u] = 0;
    if (v < kv) {
      Act::Load(act, v, blockIdx.x == 0, af[u]);
      if constexpr (Act::kScaled) {
        group[u] = Act::GroupOf(act, v);
        a_scale[u] = act.a_scales[group[u]];
      }
    } else {
#pragma unroll
      for (int j = 0; j < kE; ++j) af[u][j] = 0.0f;
    }
  }

  int buf = 0;
  for (int g = r0; g < r1; g += kStep) {
    if (g + kStep < r1) LoadGroup<Out, T, U, RB>(nxt, b, g + kStep, r1, tid, kv, row_bytes, half_rows);
    float acc[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r] = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        float wf[kE];
        Rows::Decode(cur[u][r], wf);
        if constexpr (Act::kScaled) {
          float t = 0.0f;
#pragma unroll
          for (int j = 0; j < kE; ++j) t = __fmaf_rn(af[u][j], wf[j], t);
          const float s = SlotValid<Out, RB>(g, r, r1) && tid + u * T < kv
                              ? a_scale[u] * Act::WeightScale(act, RowOfSlot<Out, RB>(g, r, half_rows), group[u])
                              : 0.0f;
          acc[r] = __fmaf_rn(t, s, acc[r]);
        } else {
#pragma unroll
          for (int j = 0; j < kE; ++j) acc[r] = __fmaf_rn(af[u][j], wf[j], acc[r]);
        }
      }
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      float s = acc[r];
#pragma unroll
      for (int off = 16; off >= 1; off /= 2) s = s + __shfl_xor_sync(0xFFFFFFFFu, s, off);
      if (lane == 0) part[buf][warp][r] = s;
    }
    // One barrier per group: part is double-buffered, so the next group's writes go to the
    // other half while this group's sums are read.
    __syncthreads();
    if (tid < RB) {
      float sums[RB];
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        float t = part[buf][0][r];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) t = t + part[buf][w][r];
        sums[r] = t;
      }
      Out::template Store<RB>(o, sums, tid, g, r1, half_rows);
    }
    buf ^= 1;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RB; ++r) cur[u][r] = nxt[u][r];
  }
}

std::atomic<int64_t> g_early_load_launches{0};
std::atomic<int64_t> g_bf16_launches{0};
std::atomic<int64_t> g_silu_launches{0};

template <typename Rows, typename Act, typename Out, int T, int U, int RB>
int ResidentCtas() {
  static const int n = [] {
    int blocks = 0;
    VT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, GemvKernel<Rows, Act, Out, T, U, RB>, T, 0));
    return std::max(blocks, 1);
  }();
  return n;
}

template <typename Rows, typename Act, typename Out, int T, int U, int RB>
void Launch(CudaQueue& cq, const GemvOut& o, const GemvAct& act, const Tensor& b, GemvLaunch how) {
  const int N = static_cast<int>(b.dim(0)), K = static_cast<int>(b.dim(1));
  const uint32_t group_bytes = static_cast<uint32_t>(RB * b.dim(1) * static_cast<int64_t>(DTypeSize(b.dtype())));
  // One wave, but no CTA with fewer rows than a group: every resident CTA slot streams,
  // which keeps more loads in flight than leaving room for the next kernel's CTAs to start
  // and prefetch early (bench/kernel_notes.md, GEMV grid size).
  const int64_t wave = static_cast<int64_t>(std::max(cq.sm_count, 1)) * ResidentCtas<Rows, Act, Out, T, U, RB>();
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wave, N / RB)));
  const bool overlap = TakeOverlap(cq) && how.overlap;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(T);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = cq.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  VT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, GemvKernel<Rows, Act, Out, T, U, RB>, act,
                                   static_cast<const uint8_t*>(b.data()), o, N, K, overlap ? 1 : 0,
                                   overlap && how.l2_prefetch > 0 ? std::max<uint32_t>(how.l2_prefetch, group_bytes)
                                                                  : 0u,
                                   overlap && how.early_weight_loads ? 1 : 0));
  if (overlap && how.early_weight_loads) g_early_load_launches.fetch_add(1, std::memory_order_relaxed);
  VT_CUDA_CHECK_LAUNCH("GemvKernel");
}

struct Variant {
  int threads, vectors, rows;
  void (*launch)(CudaQueue&, const GemvOut&, const GemvAct&, const Tensor&, GemvLaunch);
};

// The instantiated tunings: threads per CTA, 16-byte vectors per thread and row (so rows of
// up to threads * vectors vectors), rows per group. The set follows three rules: no thread
// is idle (ChooseVariant takes the fewest threads x vectors that cover the row), one vector
// per thread rather than several up to 768 threads, and groups of 4 rows, within the
// 64-register budget of MinCtasPerSm. bench/kernel_notes.md has the measurements behind
// each rule (made with FP8 rows; the BF16 rows take the same tunings).
template <typename Rows, typename Act, typename Out, int T, int U, int RB>
constexpr Variant V() {
  return {T, U, RB, &Launch<Rows, Act, Out, T, U, RB>};
}

template <typename Rows, typename Act = ActCodes<Rows>, typename Out = OutRows>
constexpr Variant kVariants[] = {
    V<Rows, Act, Out, 64, 1, 4>(),  V<Rows, Act, Out, 128, 1, 4>(), V<Rows, Act, Out, 192, 1, 4>(),
    V<Rows, Act, Out, 256, 1, 4>(), V<Rows, Act, Out, 512, 1, 4>(), V<Rows, Act, Out, 768, 1, 4>(),
    V<Rows, Act, Out, 512, 2, 4>(),
};

// The tuning for rows of kv vectors: the fewest threads x vectors that cover the row (in
// the order above). The same for every activation and output policy, so a row's sum is
// the same whichever policies run it.
template <typename Rows, typename Act = ActCodes<Rows>, typename Out = OutRows>
const Variant& ChooseVariant(int64_t kv) {
  for (const Variant& v : kVariants<Rows, Act, Out>)
    if (kv <= int64_t{v.threads} * v.vectors) return v;
  return kVariants<Rows, Act, Out>[std::size(kVariants<Rows, Act, Out>) - 1];
}

GemvAct CodesOf(const Tensor& a) { return {a.data()}; }
GemvOut RowsTo(const Tensor& out, float alpha, const Tensor* bias) {
  return {out.data(), out.dtype(), bias ? bias->data() : nullptr, bias ? bias->dtype() : DType::kF32, alpha, 1.0f,
          nullptr};
}

bool Aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// VT_CUDA_BF16_GEMV=0 keeps BF16 decode products on cuBLASLt (read once; for A/B runs).
bool Bf16GemvOn() {
  static const bool on = SwitchOn("VT_CUDA_BF16_GEMV");
  return on;
}

}  // namespace

bool GemvFits(const Tensor& a, const Tensor& b) {
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  return M == 1 && K % 16 == 0 && K >= kGemvMinK && K <= kGemvMaxK && N < (int64_t{1} << 30) && Aligned16(a) &&
         Aligned16(b);
}

bool Bf16GemvFits(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  return Bf16GemvOn() && M == 1 && a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16 &&
         (out.dtype() == DType::kF32 || out.dtype() == DType::kBF16) && K % 8 == 0 && K >= kBf16GemvMinK && K <= kBf16GemvMaxK && N < (int64_t{1} << 30) && Aligned16(a) && Aligned16(b);
}

GemvLaunch GemvLaunchFor(const Tensor& b) { return b.read_only() ? kGemvReadOnlyLaunch : kGemvDefaultLaunch; }

int64_t GemvEarlyLoadLaunches() { return g_early_load_launches.load(std::memory_order_relaxed); }

int64_t Bf16GemvLaunches() { return g_bf16_launches.load(std::memory_order_relaxed); }

void MatmulFp8Gemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                   const Tensor* bias) {
  MatmulFp8GemvVariant(q, out, a, b, alpha, bias, -1, GemvLaunchFor(b));
}

void MatmulBf16Gemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias) {
  if (a.dim(0) * b.dim(0) == 0) return;
  VT_CHECK(Bf16GemvFits(out, a, b), "internal: MatmulBf16Gemv of ", a.Describe(), " and ", b.Describe(), " into ",
           out.Describe());
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  ChooseVariant<Bf16Rows>(b.dim(1) / 8).launch(cq, RowsTo(out, 1.0f, bias), CodesOf(a), b, GemvLaunchFor(b));
  g_bf16_launches.fetch_add(1, std::memory_order_relaxed);
}

int GemvVariantCount() { return static_cast<int>(std::size(kVariants<Fp8Rows>)); }

std::string GemvVariantName(int i) {
  const Variant& v = kVariants<Fp8Rows>[i];
  return StrCat("gemv-", v.threads, "x", v.vectors, "r", v.rows);
}

int64_t GemvVariantMaxK(int i) { return int64_t{16} * kVariants<Fp8Rows>[i].threads * kVariants<Fp8Rows>[i].vectors; }

bool MatmulFp8GemvVariant(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                          const Tensor* bias, int variant, GemvLaunch how) {
  if (a.dim(0) * b.dim(0) == 0) return true;
  if (!GemvFits(a, b)) {
    MatmulFp8SplitK(q, out, a, b, alpha, bias);
    return variant < 0;
  }
  CudaQueue& cq = Cuda(q);
  const Variant& v = variant < 0 ? ChooseVariant<Fp8Rows>(b.dim(1) / 16) : kVariants<Fp8Rows>[variant];
  if (b.dim(1) > int64_t{16} * v.threads * v.vectors) return false;
  DeviceGuard guard(cq.device.index);
  v.launch(cq, RowsTo(out, alpha, bias), CodesOf(a), b, how);
  return true;
}

bool SiluGemvFits(const Tensor& x8, const Tensor& w_gate_up) {
  // VT_CUDA_SILU_GEMV=0 runs the GEMV into BF16 and SiluMulQuantFp8 instead (for A/B runs).
  static const bool on = SwitchOn("VT_CUDA_SILU_GEMV");
  return on && w_gate_up.dim(0) % 2 == 0 && GemvFits(x8, w_gate_up);
}

void MatmulFp8GemvSiluMulQuant(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                               const Tensor& w_gate_up, float alpha, float input_scale) {
  VT_CHECK(SiluGemvFits(x8, w_gate_up), "internal: MatmulFp8GemvSiluMulQuant of ", x8.Describe(), " and ",
           w_gate_up.Describe());
  if (w_gate_up.dim(0) == 0) return;
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const GemvOut o{gate_up.data(), DType::kBF16, nullptr, DType::kF32, alpha, 1.0f / input_scale,
                  out8.data_as<uint8_t>()};
  ChooseVariant<Fp8Rows, ActCodes<Fp8Rows>, OutSiluMulQuant>(w_gate_up.dim(1) / 16)
      .launch(cq, o, CodesOf(x8), w_gate_up, GemvLaunchFor(w_gate_up));
  g_silu_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t SiluMulQuantGemvLaunches() { return g_silu_launches.load(std::memory_order_relaxed); }

namespace {
std::atomic<int64_t> g_group_scaled_launches{0};
}  // namespace

bool GroupScaledGemvFits(const Tensor& a, const Tensor& b, int64_t block_n, int64_t block_k) {
  // VT_CUDA_GROUP_SCALED_GEMV=0 leaves one-row products to the other paths (for A/B runs).
  static const bool on = SwitchOn("VT_CUDA_GROUP_SCALED_GEMV");
  if (!on) return false;
  const int64_t K = b.dim(1);
  const bool pow2_n = block_n > 0 && block_n <= (int64_t{1} << 30) && (block_n & (block_n - 1)) == 0;
  return pow2_n && (block_k % 16 == 0 || block_k >= K) && GemvFits(a, b);
}

void MatmulFp8GroupScaledGemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                              const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                              const Tensor* bias) {
  VT_CHECK(GroupScaledGemvFits(a, b, block_n, block_k), "internal: MatmulFp8GroupScaledGemv of ", a.Describe(),
           " and ", b.Describe(), " in blocks ", block_n, "x", block_k);
  if (b.dim(0) == 0) return;
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  int shift = 0;
  while ((int64_t{1} << shift) < block_n) ++shift;
  GemvAct act = CodesOf(a);
  act.a_scales = a_scales.data_as<float>();
  act.b_scales = b_scales.data_as<float>();
  act.bn_shift = shift;
  act.block_k = static_cast<int>(std::min(block_k, b.dim(1)));
  act.groups = static_cast<int>(a_scales.dim(1));
  ChooseVariant<Fp8Rows, ActGroupScaled<Fp8Rows>>(b.dim(1) / 16)
      .launch(cq, RowsTo(out, 1.0f, bias), act, b, GemvLaunchFor(b));
  g_group_scaled_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t GroupScaledGemvLaunches() { return g_group_scaled_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
