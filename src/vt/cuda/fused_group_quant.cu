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
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

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
  bool zero_centred;  // RmsNorm: RmsNormZeroCentred's element, (v * inv) * (1 + w)
};

// The RmsNorm element before its BF16 rounding: RmsNorm's or RmsNormZeroCentred's.
__device__ __forceinline__ float NormElement(float v, float inv, float w, bool zero_centred) {
  return zero_centred ? (v * inv) * (1.0f + w) : RoundAny(DType::kBF16, v * inv) * w;
}

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
    return RoundAny(DType::kBF16, NormElement(v, inv, LoadAny(a.w, a.wd, i), a.zero_centred));
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

// The quantization of the staged BF16 values y of columns [0, len) of this CTA's slice:
// warps take the slice's groups in turn (NaN left out of the max: exact in any order).
__device__ __forceinline__ void QuantizeStaged(const RowArgs& a, const float* y, int64_t row, int64_t c0,
                                               int64_t len) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t g0 = c0 / a.group_size, groups = (len + a.group_size - 1) / a.group_size;
  for (int64_t gi = warp; gi < groups; gi += warps) {
    const int64_t k0 = gi * a.group_size, k1 = k0 + a.group_size < len ? k0 + a.group_size : len;
    float mx = 0.0f;
    for (int64_t k = k0 + lane; k < k1; k += 32) {
      const float v = fabsf(y[k]);
      mx = v > mx ? v : mx;
    }
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) {
      const float o = __shfl_xor_sync(0xFFFFFFFFu, mx, off);
      mx = o > mx ? o : mx;
    }
    const float s = Fp8GroupScale(mx, a.amax_floor, a.scale_floor);
    if (lane == 0) a.scales[row * a.G + g0 + gi] = s;
    uint8_t* out = a.out + row * a.H + c0;
    for (int64_t k = k0 + lane; k < k1; k += 32) out[k] = Fp8QuantizeDiv(y[k], s);
  }
}

// The vector form for 16-bit operands whose rows are whole aligned 16-byte vectors: CTA
// (row, slice) takes columns [slice · a.slice_len, ...) of its row (the whole row for the
// norms, whose sum needs it; whole groups for SiLU-mul), thread t the 8-element vectors t,
// t + blockDim, ... (kVecs of them at most), every operand's vectors loaded before any is
// used (so the loads are in flight together, as norm.cu's row kernels do). The values and
// their order of arithmetic are those of RowGroupQuantKernel.
template <RowOp kOp, int kVecs>
__global__ void __launch_bounds__(1024) RowGroupQuantVecKernel(RowArgs a, int64_t slice_len) {
  PdlWait();
  extern __shared__ __align__(16) float staged[];
  __shared__ float inv_shared;
  const int64_t row = blockIdx.x, H = a.H, base = row * H;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * slice_len;
  const int64_t len = c0 + slice_len < H ? slice_len : H - c0, vecs = len / 8;
  uint4 xb[kVecs], rb[kVecs], wb[kVecs], gb[kVecs];
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (vi < vecs) {
      if constexpr (kOp == RowOp::kSiluMul) {
        xb[c] = static_cast<const uint4*>(a.x)[(2 * base + c0) / 8 + vi];       // gate
        gb[c] = static_cast<const uint4*>(a.x)[(2 * base + H + c0) / 8 + vi];   // up
      } else {
        xb[c] = static_cast<const uint4*>(a.x)[base / 8 + vi];
        wb[c] = static_cast<const uint4*>(a.w)[vi];
        if (kOp == RowOp::kRmsNorm && a.residual != nullptr) rb[c] = static_cast<const uint4*>(a.residual)[base / 8 + vi];
        if (kOp == RowOp::kRmsNormGated) gb[c] = static_cast<const uint4*>(a.gate)[base / 8 + vi];
      }
    }
  }
  float v[kVecs][8];
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t vi = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (vi < vecs) {
      Unpack8(xb[c], a.xd, v[c]);
      if constexpr (kOp == RowOp::kSiluMul) {
        float u[8];
        Unpack8(gb[c], a.xd, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[c][k] = RoundAny(DType::kBF16, numerics::Silu(v[c][k]) * u[k]);
      } else if (kOp == RowOp::kRmsNorm && a.residual != nullptr) {
        float r[8];
        Unpack8(rb[c], a.xd, r);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[c][k] = RoundAny(a.xd, v[c][k] + r[k]);
        static_cast<uint4*>(a.residual)[base / 8 + vi] = Pack8(v[c], a.xd);
      }
      auto* st = reinterpret_cast<float4*>(staged);
      st[2 * vi] = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
      st[2 * vi + 1] = make_float4(v[c][4], v[c][5], v[c][6], v[c][7]);
    }
  }
  if constexpr (kOp != RowOp::kSiluMul) {
    const float* st = staged;
    const float inv = RowRmsInverse([st](int64_t i) { return st[i]; }, H, a.eps, &inv_shared);
#pragma unroll
    for (int c = 0; c < kVecs; ++c) {
      const int64_t vi = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
      if (vi < vecs) {
        float w[8], y[8];
        Unpack8(wb[c], a.wd, w);
        if constexpr (kOp == RowOp::kRmsNorm) {
#pragma unroll
          for (int k = 0; k < 8; ++k) y[k] = RoundAny(DType::kBF16, NormElement(v[c][k], inv, w[k], a.zero_centred));
        } else {
          float g[8];
          Unpack8(gb[c], a.gd, g);
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const float t = RoundAny(DType::kBF16, v[c][k] * inv);
            const float u = RoundAny(DType::kBF16, t * w[k]);
            y[k] = RoundAny(DType::kBF16, u * numerics::Silu(g[k]));
          }
        }
        if (a.normed != nullptr) reinterpret_cast<uint4*>(a.normed)[base / 8 + vi] = Pack8(y, DType::kBF16);
        auto* st4 = reinterpret_cast<float4*>(staged);
        st4[2 * vi] = make_float4(y[0], y[1], y[2], y[3]);
        st4[2 * vi + 1] = make_float4(y[4], y[5], y[6], y[7]);
      }
    }
  }
  __syncthreads();
  QuantizeStaged(a, staged, row, c0, len);
}

std::atomic<int64_t> g_launches{0}, g_staged_launches{0};

std::atomic<int64_t> g_vec_launches{0};

// A kernel's dynamic shared memory limit raised to kMaxStagedH floats, once per kernel
// (`bit`, below 64) and device (below 64).
std::atomic<uint64_t> g_smem_allowed[64];
template <typename Kernel>
void AllowSmem(Kernel kernel, int device, int bit) {
  const uint64_t mask = uint64_t{1} << bit;
  std::atomic<uint64_t>& done = g_smem_allowed[device & 63];
  if (done.load(std::memory_order_acquire) & mask) return;
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kMaxStagedH * sizeof(float))));
  done.fetch_or(mask, std::memory_order_acq_rel);
}
// Bits of AllowSmem: the scalar staged kernels 0-2, the vector ones 3-8.
template <RowOp kOp>
int StagedSmemBit() { return static_cast<int>(kOp); }
template <RowOp kOp>
int VecSmemBit(int vecs) { return 3 + 2 * static_cast<int>(kOp) + (vecs - 1); }

// Whether the vector kernel takes the call: 16-bit operands, rows of whole aligned 16-byte
// vectors, and a row (norms) or slice (SiLU-mul) that fits the staging.
template <RowOp kOp>
bool VecFits(const RowArgs& a) {
  if (!VecRowsOn() || !Is16Bit(a.xd) || a.H % 8 != 0 || !AlignedTo(a.x, 16)) return false;
  if (a.normed != nullptr && !AlignedTo(a.normed, 16)) return false;
  if constexpr (kOp == RowOp::kSiluMul) {
    return a.H <= kMaxStagedH || (a.group_size % 8 == 0 && a.group_size <= 2048);
  } else {
    if (!Is16Bit(a.wd) || !AlignedTo(a.w, 16) || a.H > kMaxStagedH) return false;
    if (kOp == RowOp::kRmsNorm) return a.residual == nullptr || AlignedTo(a.residual, 16);
    return Is16Bit(a.gd) && AlignedTo(a.gate, 16);
  }
}

template <RowOp kOp>
void LaunchRowGroupQuant(const Queue& q, const RowArgs& a, int64_t rows) {
  if (rows == 0 || a.H == 0) return;
  VT_CHECK(rows < (int64_t{1} << 31), OpName(kOp == RowOp::kSiluMul        ? OpId::kSiluMulQuantFp8PerTokenGroup
                                             : kOp == RowOp::kRmsNorm && a.zero_centred
                                                 ? OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup
                                             : kOp == RowOp::kRmsNorm ? OpId::kRmsNormQuantFp8PerTokenGroup
                                                                           : OpId::kRmsNormGatedQuantFp8PerTokenGroup),
           ": ", rows, " rows exceed the CUDA grid");
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  if (VecFits<kOp>(a)) {
    // SiLU-mul: slices of whole groups up to 2048 columns (a decode row's groups spread over
    // CTAs); the norms: the whole row.
    int64_t slice = a.H;
    if (kOp == RowOp::kSiluMul && a.group_size % 8 == 0 && a.group_size <= 2048)
      slice = std::min(a.H, a.group_size * (2048 / a.group_size));
    const int64_t vecs = slice / 8;
    const int threads = vecs > 512 ? 1024 : static_cast<int>(std::max<int64_t>(64, (vecs + 31) / 32 * 32));
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((a.H + slice - 1) / slice));
    const size_t smem = static_cast<size_t>(slice) * sizeof(float);
    g_launches.fetch_add(1, std::memory_order_relaxed);
    g_vec_launches.fetch_add(1, std::memory_order_relaxed);
    if (vecs <= threads) {
      AllowSmem(RowGroupQuantVecKernel<kOp, 1>, cq.device.index, VecSmemBit<kOp>(1));
      LaunchOverlapped(cq, "RowGroupQuantVecKernel", RowGroupQuantVecKernel<kOp, 1>, grid, dim3(threads), smem, a, slice);
    } else {
      AllowSmem(RowGroupQuantVecKernel<kOp, 2>, cq.device.index, VecSmemBit<kOp>(2));
      LaunchOverlapped(cq, "RowGroupQuantVecKernel", RowGroupQuantVecKernel<kOp, 2>, grid, dim3(threads), smem, a, slice);
    }
    return;
  }
  // Narrow rows (the gated norm's heads, 128 wide) take fewer threads.
  const int threads = a.H >= 1024 ? kThreads : a.H >= 256 ? 128 : 64;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.H <= kMaxStagedH) {
    AllowSmem(RowGroupQuantKernel<kOp, true>, cq.device.index, StagedSmemBit<kOp>());
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

// RmsNormQuantFp8PerTokenGroup (kZeroCentred false) and RmsNormZeroCentredQuantFp8PerTokenGroup.
template <bool kZeroCentred>
void NormQuantFp8PerTokenGroupCuda(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                   const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                   float scale_floor, const Tensor* residual, const Tensor* normed_out) {
  RowArgs a = Common(out, scales, x, x.dim(1), group_size, amax_floor, scale_floor);
  a.w = weight.data();
  a.wd = weight.dtype();
  a.residual = residual != nullptr ? residual->data() : nullptr;
  a.normed = normed_out != nullptr ? normed_out->data_as<uint16_t>() : nullptr;
  a.eps = eps;
  a.zero_centred = kZeroCentred;
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
  return {g_launches.load(std::memory_order_relaxed), g_staged_launches.load(std::memory_order_relaxed),
          g_vec_launches.load(std::memory_order_relaxed)};
}

// Registered only with VT_CUDA_FUSED_GROUP_QUANT=1: in the batch-1 decode of the 8B shape
// the model's steps with these ops measured slower than with the norm or SiLU-mul and
// QuantFp8PerTokenGroup apart (bench/README.md), so by default models run the two ops.
void RegisterFusedGroupQuantKernels() {
  const char* on = std::getenv("VT_CUDA_FUSED_GROUP_QUANT");
  if (on == nullptr || std::string_view(on) != "1") return;
  Register<OpId::kRmsNormQuantFp8PerTokenGroup>(DeviceType::kCUDA, &NormQuantFp8PerTokenGroupCuda<false>);
  Register<OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup>(DeviceType::kCUDA, &NormQuantFp8PerTokenGroupCuda<true>);
  Register<OpId::kRmsNormGatedQuantFp8PerTokenGroup>(DeviceType::kCUDA, &RmsNormGatedQuantFp8PerTokenGroupCuda);
  Register<OpId::kSiluMulQuantFp8PerTokenGroup>(DeviceType::kCUDA, &SiluMulQuantFp8PerTokenGroupCuda);
}

}  // namespace vt::cuda
