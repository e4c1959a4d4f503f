// CUDA fused recipes with the per-token-group quantizer: RmsNorm, gated RmsNorm or SiLU-mul
// of a row and QuantFp8PerTokenGroup of its BF16 result, in one launch, byte-identical to
// FusedChainComposite (the standalone kernels' arithmetic for the BF16 row, then each group's
// amax, Fp8GroupScale and Fp8QuantizeDiv as quant.cu computes them).
//
// One CTA per row. Its threads form the row's BF16 values y (after the residual add and the
// canonical sum of squares of the norm, RowRmsInverse) and keep them in shared memory when
// the row fits (else they form them again from global memory in each later pass); then each
// warp takes groups in turn: the max of |y| over the group (NaN left out: exact in any
// order), the scale by lane 0, and every element's x / s.
#include <atomic>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/norm_row.cuh"
#include "vt/ops/fused.h"
#include "vt/ops/quant.h"

namespace vt::cuda {

namespace {

enum class RowOp { kRmsNorm, kRmsNormGated, kSiluMul };

struct RowArgs {
  uint8_t* out;      // [rows, H] F8E4M3
  float* scales;     // [rows, G]
  const void* x;     // [rows, H] ([rows, 2H] for SiLU-mul: [gate | up])
  DType xd;
  const void* gate;  // gated RmsNorm: [rows, H]
  DType gd;
  const void* w;     // norm weight [H]
  DType wd;
  void* residual;    // RmsNorm: [rows, H] in x's dtype, added first and updated; nullable
  uint16_t* normed;  // RmsNorm: the BF16 row, nullable
  int64_t H, G, group_size;
  float eps, amax_floor, scale_floor;
};

constexpr int kThreads = 256;
constexpr int64_t kMaxStagedH = 16384;  // 64 KiB of staged floats (past the 48 KiB default)

// The BF16 value of element i of the row starting at `base` (of the output) once the row's inverse RMS is known (norms).
template <RowOp kOp>
__device__ __forceinline__ float RowValue(const RowArgs& a, int64_t base, int64_t i, float inv) {
  if constexpr (kOp == RowOp::kSiluMul) {  // x's row starts at 2 * base
    const float g = LoadAny(a.x, a.xd, 2 * base + i);
    const float u = LoadAny(a.x, a.xd, 2 * base + a.H + i);
    return RoundAny(DType::kBF16, numerics::Silu(g) * u);
  } else if constexpr (kOp == RowOp::kRmsNorm) {
    const float v = a.residual != nullptr ? LoadAny(a.residual, a.xd, base + i) : LoadAny(a.x, a.xd, base + i);
    return RoundAny(DType::kBF16, RoundAny(DType::kBF16, v * inv) * LoadAny(a.w, a.wd, i));
  } else {
    const float t = RoundAny(DType::kBF16, LoadAny(a.x, a.xd, base + i) * inv);
    const float u = RoundAny(DType::kBF16, t * LoadAny(a.w, a.wd, i));
    return RoundAny(DType::kBF16, u * numerics::Silu(LoadAny(a.gate, a.gd, base + i)));
  }
}

template <RowOp kOp, bool kStaged>
__global__ void __launch_bounds__(kThreads) RowGroupQuantKernel(RowArgs a) {
  PdlWait();
  extern __shared__ float staged[];  // kStaged: the row (after the residual add), then y
  __shared__ float inv_shared;
  const int64_t row = blockIdx.x, H = a.H, base = row * H;
  float inv = 0.0f;
  if constexpr (kOp != RowOp::kSiluMul) {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
      float v = LoadAny(a.x, a.xd, base + i);
      if (kOp == RowOp::kRmsNorm && a.residual != nullptr) {
        v = RoundAny(a.xd, v + LoadAny(a.residual, a.xd, base + i));
        StoreAny(a.residual, a.xd, base + i, v);
      }
      if (kStaged) staged[i] = v;
    }
    if constexpr (kStaged) {
      const float* st = staged;
      inv = RowRmsInverse([st](int64_t i) { return st[i]; }, H, a.eps, &inv_shared);
    } else {
      const void* src = kOp == RowOp::kRmsNorm && a.residual != nullptr ? a.residual : a.x;
      const DType xd = a.xd;
      inv = RowRmsInverse([src, xd, base](int64_t i) { return LoadAny(src, xd, base + i); }, H, a.eps, &inv_shared);
    }
  }
  // y: staged (each thread its own elements; RowRmsInverse ended with a barrier), the BF16
  // side output.
  if (kStaged || a.normed != nullptr) {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
      const float y = RowValue<kOp>(a, base, i, inv);
      if (kStaged) staged[i] = y;
      if (a.normed != nullptr) a.normed[base + i] = FloatToBf16(y);
    }
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t g = warp; g < a.G; g += warps) {
    const int64_t k0 = g * a.group_size, k1 = k0 + a.group_size < H ? k0 + a.group_size : H;
    float mx = 0.0f;
    for (int64_t k = k0 + lane; k < k1; k += 32) {
      const float v = fabsf(kStaged ? staged[k] : RowValue<kOp>(a, base, k, inv));
      mx = v > mx ? v : mx;  // NaN fails the comparison: left out
    }
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) {
      const float o = __shfl_xor_sync(0xFFFFFFFFu, mx, off);
      mx = o > mx ? o : mx;
    }
    const float s = Fp8GroupScale(mx, a.amax_floor, a.scale_floor);
    if (lane == 0) a.scales[row * a.G + g] = s;
    for (int64_t k = k0 + lane; k < k1; k += 32)
      a.out[base + k] = Fp8QuantizeDiv(kStaged ? staged[k] : RowValue<kOp>(a, base, k, inv), s);
  }
}

std::atomic<int64_t> g_launches{0}, g_staged_launches{0};

// The staged kernel's dynamic shared memory limit raised to kMaxStagedH floats, once per
// instantiation and device.
template <RowOp kOp>
void AllowStagedSmem(int device) {
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  VT_CUDA_CHECK(cudaFuncSetAttribute(RowGroupQuantKernel<kOp, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kMaxStagedH * sizeof(float))));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

template <RowOp kOp>
void LaunchRowGroupQuant(const Queue& q, const RowArgs& a, int64_t rows) {
  if (rows == 0 || a.H == 0) return;
  VT_CHECK(rows < (int64_t{1} << 31), OpName(kOp == RowOp::kSiluMul        ? OpId::kSiluMulQuantFp8PerTokenGroup
                                             : kOp == RowOp::kRmsNorm      ? OpId::kRmsNormQuantFp8PerTokenGroup
                                                                           : OpId::kRmsNormGatedQuantFp8PerTokenGroup),
           ": ", rows, " rows exceed the CUDA grid");
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  // Narrow rows (the gated norm's heads, 128 wide) take fewer threads.
  const int threads = a.H >= 1024 ? kThreads : a.H >= 256 ? 128 : 64;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.H <= kMaxStagedH) {
    AllowStagedSmem<kOp>(cq.device.index);
    g_staged_launches.fetch_add(1, std::memory_order_relaxed);
    LaunchOverlapped(cq, "RowGroupQuantKernel", RowGroupQuantKernel<kOp, true>, dim3(static_cast<unsigned>(rows)),
                     dim3(threads), static_cast<size_t>(a.H) * sizeof(float), a);
  } else {
    LaunchOverlapped(cq, "RowGroupQuantKernel", RowGroupQuantKernel<kOp, false>, dim3(static_cast<unsigned>(rows)),
                     dim3(threads), 0, a);
  }
}

RowArgs Common(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t H, int64_t group_size,
               float amax_floor, float scale_floor) {
  RowArgs a{};
  a.out = out.data_as<uint8_t>();
  a.scales = scales.data_as<float>();
  a.x = x.data();
  a.xd = x.dtype();
  a.gd = a.wd = DType::kF32;
  a.H = H;
  a.G = scales.dim(1);
  a.group_size = group_size;
  a.amax_floor = amax_floor;
  a.scale_floor = scale_floor;
  return a;
}

void RmsNormQuantFp8PerTokenGroupCuda(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                      const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                      float scale_floor, const Tensor* residual, const Tensor* normed_out) {
  RowArgs a = Common(out, scales, x, x.dim(1), group_size, amax_floor, scale_floor);
  a.w = weight.data();
  a.wd = weight.dtype();
  a.residual = residual != nullptr ? residual->data() : nullptr;
  a.normed = normed_out != nullptr ? normed_out->data_as<uint16_t>() : nullptr;
  a.eps = eps;
  LaunchRowGroupQuant<RowOp::kRmsNorm>(q, a, x.dim(0));
}

void RmsNormGatedQuantFp8PerTokenGroupCuda(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                           const Tensor& gate, const Tensor& weight, float eps, int64_t group_size,
                                           float amax_floor, float scale_floor) {
  RowArgs a = Common(out, scales, x, x.dim(1), group_size, amax_floor, scale_floor);
  a.gate = gate.data();
  a.gd = gate.dtype();
  a.w = weight.data();
  a.wd = weight.dtype();
  a.eps = eps;
  LaunchRowGroupQuant<RowOp::kRmsNormGated>(q, a, x.dim(0));
}

void SiluMulQuantFp8PerTokenGroupCuda(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                      int64_t group_size, float amax_floor, float scale_floor) {
  const RowArgs a = Common(out, scales, x, x.dim(1) / 2, group_size, amax_floor, scale_floor);
  LaunchRowGroupQuant<RowOp::kSiluMul>(q, a, x.dim(0));
}

}  // namespace

FusedGroupQuantCounts FusedGroupQuantLaunches() {
  return {g_launches.load(std::memory_order_relaxed), g_staged_launches.load(std::memory_order_relaxed)};
}

void RegisterFusedGroupQuantKernels() {
  Register<OpId::kRmsNormQuantFp8PerTokenGroup>(DeviceType::kCUDA, &RmsNormQuantFp8PerTokenGroupCuda);
  Register<OpId::kRmsNormGatedQuantFp8PerTokenGroup>(DeviceType::kCUDA, &RmsNormGatedQuantFp8PerTokenGroupCuda);
  Register<OpId::kSiluMulQuantFp8PerTokenGroup>(DeviceType::kCUDA, &SiluMulQuantFp8PerTokenGroupCuda);
}

}  // namespace vt::cuda
