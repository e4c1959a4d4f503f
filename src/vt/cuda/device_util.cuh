// Device-side helpers of the CUDA kernels: element access by run-time dtype (a uniform
// branch per element, cheap next to the memory traffic of these memory-bound ops), the
// canonical warp sum of squares, and launch sizes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "vt/cuda/context.h"
#include "vt/detail/numerics.h"
#include "vt/dtype.h"

namespace vt::cuda {

__device__ __forceinline__ float LoadAny(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return F16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kF8E4M3: return Fp8E4M3ToFloat(static_cast<const uint8_t*>(p)[i]);
    default: return 0.0f;
  }
}

__device__ __forceinline__ void StoreAny(void* p, DType d, int64_t i, float v) {
  switch (d) {
    case DType::kF32: static_cast<float*>(p)[i] = v; return;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = FloatToBf16(v); return;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = FloatToF16(v); return;
    default: return;
  }
}

// v rounded to dtype d and widened back (identity for F32), as the CPU's RoundTo.
__device__ __forceinline__ float RoundAny(DType d, float v) {
  switch (d) {
    case DType::kBF16: return Bf16ToFloat(FloatToBf16(v));
    case DType::kF16: return F16ToFloat(FloatToF16(v));
    default: return v;
  }
}

// The canonical 32-lane combine of numerics::SumSquaresCanonical: lane j holds the fma
// chain of elements j, j+32, ...; then j += j+16, j += j+8, ..., j += j+1. Every lane
// gets lane 0's result.
__device__ __forceinline__ float WarpCanonicalSum(float acc) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) {
    const float other = __shfl_down_sync(0xFFFFFFFFu, acc, off);
    acc = acc + other;
  }
  return __shfl_sync(0xFFFFFFFFu, acc, 0);
}

// numerics::QuantizeFp8 with the NaN sign kept explicitly: CUDA arithmetic returns the
// canonical NaN (0x7FFFFFFF) for x * inv with x NaN, losing the sign that the contract (and
// the CPU, whose arithmetic propagates the NaN operand) keeps.
__device__ __forceinline__ uint8_t QuantizeFp8KeepNan(float x, float inv) {
  if (x != x) return static_cast<uint8_t>(((__float_as_uint(x) >> 24) & 0x80u) | 0x7Fu);
  return numerics::QuantizeFp8(x, inv);
}

// Programmatic dependent launch (sm_90). A kernel started by LaunchOverlapped may become
// resident while the kernel before it in the stream still runs, which hides its launch
// latency. PdlWait(), the first statement of every such kernel, blocks until that kernel
// has completed and its writes are visible, then lets the next kernel start early in turn.
// No load or store may come before it. A no-op for a kernel launched without overlap.
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, cq.stream>>>(args...), overlapped when OverlappedLaunches(cq);
// the kernel must begin with PdlWait().
template <typename... Params, typename... Args>
void LaunchOverlapped(CudaQueue& cq, const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = cq.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = TakeOverlap(cq) ? 1 : 0;
  detail::Check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), name, __FILE__, __LINE__);
}

// Eight 16-bit floats (BF16 or F16) in one 16-byte word: the vectorised access of the row
// kernels, with the same conversions as LoadAny / StoreAny.
__device__ __forceinline__ void Unpack8(const uint4& u, DType d, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const auto h = static_cast<uint16_t>(w[k / 2] >> (16 * (k % 2)));
    f[k] = d == DType::kBF16 ? Bf16ToFloat(h) : F16ToFloat(h);
  }
}
__device__ __forceinline__ uint4 Pack8(const float (&f)[8], DType d) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t lo = d == DType::kBF16 ? FloatToBf16(f[2 * k]) : FloatToF16(f[2 * k]);
    const uint32_t hi = d == DType::kBF16 ? FloatToBf16(f[2 * k + 1]) : FloatToF16(f[2 * k + 1]);
    w[k] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// The FP8 codes of eight values rounded to od first (QuantizeFp8KeepNan), in one 8-byte word.
__device__ __forceinline__ uint2 QuantizePack8(const float (&y)[8], DType od, float q_inv) {
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < 8; ++k) w[k / 4] |= uint32_t{QuantizeFp8KeepNan(RoundAny(od, y[k]), q_inv)} << (8 * (k % 4));
  return make_uint2(w[0], w[1]);
}
inline bool Is16Bit(DType d) { return d == DType::kBF16 || d == DType::kF16; }
// Whether the 16-byte vector row kernels may run: VT_CUDA_VEC_ROWS=0 keeps the scalar ones
// (an A/B switch for benchmarks; read once per process).
inline bool VecRowsOn() {
  static const bool on = SwitchOn("VT_CUDA_VEC_ROWS");
  return on;
}
inline bool AlignedTo(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Blocks for a grid-stride loop over n items.
inline unsigned GridFor(int64_t n, int threads, const CudaQueue& cq) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(std::max(cq.sm_count, 1)) * 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap)));
}

}  // namespace vt::cuda
