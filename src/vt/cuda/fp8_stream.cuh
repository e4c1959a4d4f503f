// Device helpers shared by the FP8 streaming matmul kernels (matmul_fp8.cu,
// matmul_fp8_splitk.cu, matmul_gemv.cu): a 16-byte weight load that bypasses L1, and
// the exact decode of 16 e4m3 bytes to floats.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace vt::cuda {

// 16 bytes read once: non-coherent, not allocated in L1 (weights are streamed, never reused).
__device__ __forceinline__ uint4 LoadStream16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Two e4m3 bytes (the low 16 bits, little-endian) -> two exact floats: the hardware
// e4m3x2 -> f16x2 conversion (every e4m3 value, NaN included, is exact in f16), then
// widening. Fp8x16ToFloat does the same for 16 bytes.
__device__ __forceinline__ float2 Fp8x2ToFloat2(uint32_t two) {
  const auto pair = static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu);
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
}

__device__ __forceinline__ void Fp8x16ToFloat(const uint4 v, float (&f)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = Fp8x2ToFloat2(w[i]), b = Fp8x2ToFloat2(w[i] >> 16);
    f[4 * i + 0] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

}  // namespace vt::cuda
