// CUDA RmsNorm, RmsNormZeroCentred and RmsNormGated: one warp per row, lane j summing elements j, j+32, ...
// with fma and the canonical pairwise combine, so the sum of squares, and hence every
// output byte, equals the CPU kernel's.
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/norm_row.cuh"
#include "vt/cuda/rows.h"
#include "vt/ops/norm.h"

namespace vt::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// The normalised element: RoundAny(od, s * inv) * w, or for RmsNormZeroCentred
// (s * inv) * (1 + w) with s * inv not rounded (the CPU definitions).
__device__ __forceinline__ float NormOut(float s, float inv, float w, DType od, bool zero_centred) {
  return zero_centred ? (s * inv) * (1.0f + w) : RoundAny(od, s * inv) * w;
}

// RmsInverse of a row staged in shared memory (RowRmsInverse); call from all threads.
__device__ __forceinline__ float StagedRmsInverse(const float* staged, int64_t H, float eps, float* inv_shared) {
  return RowRmsInverse([staged](int64_t i) { return staged[i]; }, H, eps, inv_shared);
}

__global__ void RmsNormKernel(void* out, DType od, const void* x, DType xd, const void* w, DType wd, void* residual,
                              int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv, bool zero_centred) {
  PdlWait();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // uniform across the warp
  const int64_t base = row * H;
  float acc = 0.0f;
  for (int64_t i = lane; i < H; i += 32) {
    float v = LoadAny(x, xd, base + i);
    if (residual != nullptr) {
      v = RoundAny(xd, v + LoadAny(residual, xd, base + i));
      StoreAny(residual, xd, base + i, v);
    }
    acc = numerics::Fma(v, v, acc);
  }
  const float inv = numerics::RmsInverse(WarpCanonicalSum(acc), H, eps);
  for (int64_t i = lane; i < H; i += 32) {
    // The same lane wrote residual[base + i] above, so reading it back is ordered.
    const float s = residual != nullptr ? LoadAny(residual, xd, base + i) : LoadAny(x, xd, base + i);
    const float y = NormOut(s, inv, LoadAny(w, wd, i), od, zero_centred);
    if (out != nullptr) StoreAny(out, od, base + i, y);
    if (q != nullptr) q[base + i] = QuantizeFp8KeepNan(RoundAny(od, y), q_inv);
  }
}

// One CTA per row for wide rows: the warp-per-row kernel above issues one dependent load
// (or a store and its reload) per element and lane, so a 1024-wide row took ~56 us, almost
// all of it memory latency. Here every thread holds up to kPer elements of the row, x, the
// residual and the weight loaded as raw bits before any of them is converted or stored
// (so the loads of a thread are in flight together); the row after the residual add
// (rounded as above) goes to shared memory, where warp 0 runs the same canonical sum
// (StagedRmsInverse); all threads finish their elements from registers. Same arithmetic, same bytes.
constexpr int kRowThreads = 256;
constexpr int kMaxPer = 32;                                 // rows up to 8192 wide
constexpr int64_t kMaxStagedH = int64_t{kRowThreads} * kMaxPer;

__device__ __forceinline__ uint32_t LoadBits(const void* p, DType d, int64_t i) {
  return d == DType::kF32 ? static_cast<const uint32_t*>(p)[i] : static_cast<const uint16_t*>(p)[i];
}
__device__ __forceinline__ float BitsToFloat(uint32_t b, DType d) {
  switch (d) {
    case DType::kBF16: return Bf16ToFloat(static_cast<uint16_t>(b));
    case DType::kF16: return F16ToFloat(static_cast<uint16_t>(b));
    default: return __uint_as_float(b);
  }
}

template <int kPer>
__global__ void __launch_bounds__(kRowThreads)
    RmsNormRowKernel(void* out, DType od, const void* x, DType xd, const void* w, DType wd, void* residual,
                     int64_t H, float eps, uint8_t* q, float q_inv, bool zero_centred) {
  PdlWait();
  __shared__ float staged[kRowThreads * kPer];  // the row after the residual add
  __shared__ float inv_shared;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * H;
  uint32_t xb[kPer], rb[kPer], wb[kPer];
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * kRowThreads;
    if (i < H) {
      xb[c] = LoadBits(x, xd, base + i);
      if (residual != nullptr) rb[c] = LoadBits(residual, xd, base + i);
      wb[c] = LoadBits(w, wd, i);
    }
  }
  float v[kPer];
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * kRowThreads;
    if (i < H) {
      v[c] = BitsToFloat(xb[c], xd);
      if (residual != nullptr) {
        v[c] = RoundAny(xd, v[c] + BitsToFloat(rb[c], xd));
        StoreAny(residual, xd, base + i, v[c]);
      }
      staged[i] = v[c];
    }
  }
  __syncthreads();
  const float inv = StagedRmsInverse(staged, H, eps, &inv_shared);
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * kRowThreads;
    if (i < H) {
      const float y = NormOut(v[c], inv, BitsToFloat(wb[c], wd), od, zero_centred);
      if (out != nullptr) StoreAny(out, od, base + i, y);
      if (q != nullptr) q[base + i] = QuantizeFp8KeepNan(RoundAny(od, y), q_inv);
    }
  }
}

// The row kernel above with 16-byte accesses, for 16-bit x, residual, weight and out
// whose rows start 16-byte aligned (the activations of a model): thread t owns the
// 8-element vectors t, t + kVecThreads, ... of its row, so a warp moves 512 contiguous
// bytes per load instead of 64. The staging, the canonical sum (StagedRmsInverse) and every
// conversion are those of RmsNormRowKernel. A row is one CTA, so a decode step's single
// row runs on one SM: the CTA takes one thread per vector (up to 1024 threads), which
// spreads the per-element work (residual add, rounding, quantization) over as many warps
// as the row has vectors instead of 8 (VT_CUDA_NORM_WIDE=0: 256 threads, for A/B runs).
constexpr int kVecThreads = 256;
constexpr int kMaxVecThreads = 1024;

bool WideNormOn() {
  static const bool on = SwitchOn("VT_CUDA_NORM_WIDE");
  return on;
}

template <int kVecThreads, int kVecs>
__global__ void __launch_bounds__(kVecThreads)
    RmsNormRowVecKernel(void* out, DType od, const void* x, DType xd, const void* w, DType wd, void* residual,
                        int64_t H, float eps, uint8_t* q, float q_inv, bool zero_centred) {
  PdlWait();
  __shared__ __align__(16) float staged[kVecThreads * 8 * kVecs];
  __shared__ float inv_shared;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * H;  // a multiple of 8
  const auto* xv = static_cast<const uint4*>(x) + base / 8;
  auto* rv = static_cast<uint4*>(residual) + base / 8;
  const auto* wv = static_cast<const uint4*>(w);
  const int64_t vecs = H / 8;
  uint4 xb[kVecs], rb[kVecs], wb[kVecs];
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(c) * kVecThreads;
    if (vi < vecs) {
      xb[c] = xv[vi];
      if (residual != nullptr) rb[c] = rv[vi];
      wb[c] = wv[vi];
    }
  }
  float v[kVecs][8];
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(c) * kVecThreads;
    if (vi < vecs) {
      Unpack8(xb[c], xd, v[c]);
      if (residual != nullptr) {
        float r[8];
        Unpack8(rb[c], xd, r);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[c][k] = RoundAny(xd, v[c][k] + r[k]);
        rv[vi] = Pack8(v[c], xd);
      }
      // Two 16-byte stores (2-way bank conflicts) rather than eight 4-byte ones (8-way).
      auto* st = reinterpret_cast<float4*>(staged);
      st[2 * vi] = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
      st[2 * vi + 1] = make_float4(v[c][4], v[c][5], v[c][6], v[c][7]);
    }
  }
  __syncthreads();
  const float inv = StagedRmsInverse(staged, H, eps, &inv_shared);
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(c) * kVecThreads;
    if (vi < vecs) {
      float wf[8], y[8];
      Unpack8(wb[c], wd, wf);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        y[k] = NormOut(v[c][k], inv, wf[k], od, zero_centred);
      if (out != nullptr) static_cast<uint4*>(out)[base / 8 + vi] = Pack8(y, od);
      if (q != nullptr) reinterpret_cast<uint2*>(q)[base / 8 + vi] = QuantizePack8(y, od, q_inv);
    }
  }
}

std::atomic<int64_t> g_vec_launches{0}, g_wide_vec_launches{0};

template <int kThreads, int kVecs>
void LaunchRowVecKernel(CudaQueue& cq, void* out, DType od, const void* x, DType xd, const void* w, DType wd,
                        void* residual, int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv,
                        bool zero_centred) {
  g_vec_launches.fetch_add(1, std::memory_order_relaxed);
  if (kThreads > kVecThreads) g_wide_vec_launches.fetch_add(1, std::memory_order_relaxed);
  LaunchOverlapped(cq, "RmsNormRowVecKernel", RmsNormRowVecKernel<kThreads, kVecs>, static_cast<unsigned>(rows),
                   kThreads, 0, out, od, x, xd, w, wd, residual, H, eps, q, q_inv, zero_centred);
}

// Whether the vector kernel takes the call: 16-bit x / residual / weight (/ out), rows of
// whole 16-byte vectors starting aligned, and a row that fits its staging.
bool VecRowsFit(const void* out, DType od, const void* x, DType xd, const void* w, DType wd, const void* residual,
                int64_t rows, int64_t H, const uint8_t* q) {
  return VecRowsOn() && Is16Bit(xd) && Is16Bit(wd) && (out == nullptr || Is16Bit(od)) && H % 8 == 0 &&
         H <= kVecThreads * 8 * 4 &&
         rows < (int64_t{1} << 31) && AlignedTo(x, 16) && AlignedTo(w, 16) &&
         (residual == nullptr || AlignedTo(residual, 16)) && (out == nullptr || AlignedTo(out, 16)) &&
         (q == nullptr || AlignedTo(q, 8));
}

template <int kPer>
void LaunchRowKernel(CudaQueue& cq, void* out, DType od, const void* x, DType xd, const void* w, DType wd,
                     void* residual, int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv, bool zero_centred) {
  LaunchOverlapped(cq, "RmsNormRowKernel", RmsNormRowKernel<kPer>, static_cast<unsigned>(rows), kRowThreads, 0, out,
                   od, x, xd, w, wd, residual, H, eps, q, q_inv, zero_centred);
}

__global__ void RmsNormGatedKernel(void* out, DType od, const void* x, DType xd, const void* gate, DType gd,
                                   const void* w, DType wd, int64_t rows, int64_t H, float eps, uint8_t* q,
                                   float q_inv) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * H;
  float acc = 0.0f;
  for (int64_t i = lane; i < H; i += 32) {
    const float v = LoadAny(x, xd, base + i);
    acc = numerics::Fma(v, v, acc);
  }
  const float inv = numerics::RmsInverse(WarpCanonicalSum(acc), H, eps);
  for (int64_t i = lane; i < H; i += 32) {
    const float t = RoundAny(od, LoadAny(x, xd, base + i) * inv);
    const float u = RoundAny(od, t * LoadAny(w, wd, i));
    const float y = u * numerics::Silu(LoadAny(gate, gd, base + i));
    if (out != nullptr) StoreAny(out, od, base + i, y);
    if (q != nullptr) q[base + i] = QuantizeFp8KeepNan(RoundAny(od, y), q_inv);
  }
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

void RmsNormCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                 const Tensor* residual) {
  const int64_t H = x.dim(-1), rows = x.numel() / H;
  LaunchRmsNorm(Cuda(q), out.data(), out.dtype(), x.data(), x.dtype(), weight.data(), weight.dtype(),
                residual ? residual->data() : nullptr, rows, H, eps, nullptr, 0.0f);
}

void RmsNormZeroCentredCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                            const Tensor* residual) {
  const int64_t H = x.dim(-1), rows = x.numel() / H;
  LaunchRmsNorm(Cuda(q), out.data(), out.dtype(), x.data(), x.dtype(), weight.data(), weight.dtype(),
                residual ? residual->data() : nullptr, rows, H, eps, nullptr, 0.0f, true);
}

void RmsNormGatedCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                      float eps) {
  const int64_t H = x.dim(-1), rows = x.numel() / H;
  LaunchRmsNormGated(Cuda(q), out.data(), out.dtype(), x.data(), x.dtype(), gate.data(), gate.dtype(),
                     weight.data(), weight.dtype(), rows, H, eps, nullptr, 0.0f);
}

}  // namespace

void LaunchRmsNorm(CudaQueue& cq, void* out, DType od, const void* x, DType xd, const void* w, DType wd,
                   void* residual, int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv, bool zero_centred) {
  if (rows == 0) return;
  DeviceGuard guard(cq.device.index);
  if (H >= 256 && VecRowsFit(out, od, x, xd, w, wd, residual, rows, H, q)) {
    const bool wide = WideNormOn();
    const auto launch = H <= kVecThreads * 8                ? &LaunchRowVecKernel<kVecThreads, 1>
                        : wide && H <= 512 * 8              ? &LaunchRowVecKernel<512, 1>
                        : wide && H <= kMaxVecThreads * 8   ? &LaunchRowVecKernel<kMaxVecThreads, 1>
                        : H <= kVecThreads * 8 * 2          ? &LaunchRowVecKernel<kVecThreads, 2>
                                                            : &LaunchRowVecKernel<kVecThreads, 4>;
    launch(cq, out, od, x, xd, w, wd, residual, rows, H, eps, q, q_inv, zero_centred);
    return;
  }
  if (H >= kRowThreads && H <= kMaxStagedH && rows < (int64_t{1} << 31)) {
    const auto launch = H <= 4 * kRowThreads    ? &LaunchRowKernel<4>
                        : H <= 8 * kRowThreads  ? &LaunchRowKernel<8>
                        : H <= 16 * kRowThreads ? &LaunchRowKernel<16>
                                                : &LaunchRowKernel<kMaxPer>;
    launch(cq, out, od, x, xd, w, wd, residual, rows, H, eps, q, q_inv, zero_centred);
    return;
  }
  LaunchOverlapped(cq, "RmsNormKernel", RmsNormKernel, RowBlocks(rows), kWarpsPerBlock * 32, 0, out, od, x, xd, w, wd,
                   residual, rows, H, eps, q, q_inv, zero_centred);
}

int64_t RmsNormVecLaunches() { return g_vec_launches.load(std::memory_order_relaxed); }
int64_t RmsNormWideVecLaunches() { return g_wide_vec_launches.load(std::memory_order_relaxed); }

void LaunchRmsNormGated(CudaQueue& cq, void* out, DType od, const void* x, DType xd, const void* gate, DType gd,
                        const void* w, DType wd, int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv) {
  if (rows == 0) return;
  DeviceGuard guard(cq.device.index);
  RmsNormGatedKernel<<<RowBlocks(rows), kWarpsPerBlock * 32, 0, cq.stream>>>(out, od, x, xd, gate, gd, w, wd, rows,
                                                                             H, eps, q, q_inv);
  VT_CUDA_CHECK_LAUNCH("RmsNormGatedKernel");
}

void RegisterNormKernels() {
  Register<OpId::kRmsNorm>(DeviceType::kCUDA, &RmsNormCuda);
  Register<OpId::kRmsNormGated>(DeviceType::kCUDA, &RmsNormGatedCuda);
  Register<OpId::kRmsNormZeroCentred>(DeviceType::kCUDA, &RmsNormZeroCentredCuda);
}

}  // namespace vt::cuda
