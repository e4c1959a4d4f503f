// The read roofline of cuda_fp8_bench: a kernel that only streams a buffer (16-byte
// non-allocating loads, four in flight per thread, one wave of CTAs) and keeps a sum so
// the loads are not dropped. Its rate on a buffer the size of a weight matrix is the most
// a weight-streaming GEMV launched the same way can reach.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void __launch_bounds__(512) StreamReadKernel(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t s = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + i + u * stride));
#pragma unroll
    for (int u = 0; u < 4; ++u) s ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) s ^= p[i].x ^ p[i].w;
  if (s == 0x9E3779B9u) sink[0] = s;  // practically never; keeps the loads
}

}  // namespace

// Streams `bytes` (a multiple of 16) from `p` on `stream`.
void LaunchStreamRead(const void* p, int64_t bytes, uint32_t* sink, int sms, cudaStream_t stream) {
  StreamReadKernel<<<sms * 4, 512, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16, sink);
}
