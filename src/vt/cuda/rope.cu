// CUDA RotaryEmbedding (neox style): one thread per rotated pair (token, head, i < D/2),
// computing x1*c - x2*s and x2*c + x1*s in f32 as the CPU does (no contraction: the CUDA
// flags forbid fma fusion) and rounding once to the tensor's dtype. The kernel checks each
// position: one outside the cache is never read, and is reported as a vt::Error at the
// next synchronization (device_error.h).
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/rope.h"

namespace vt::cuda {

namespace {

template <typename Tag, typename P>
__global__ void RopeKernel(typename Tag::T* x, int64_t T, int64_t heads, int64_t half, const P* positions,
                           const float* cache, int64_t max_pos, IndexErrorRecord* err) {
  const int64_t n = T * heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t D = 2 * half;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t i = e % half, th = e / half;  // th = t * heads + h
    const int64_t t = th / heads;
    const int64_t pos = static_cast<int64_t>(positions[t]);
    if (pos < 0 || pos >= max_pos) {
      if (e == t * heads * half) RecordIndexError(err, IndexError::kRopePosition, t, pos, max_pos);
      continue;
    }
    const float* cs = cache + pos * D;
    const float c = cs[i], s = cs[half + i];
    typename Tag::T* p = x + th * D;
    const float x1 = Tag::Load(p[i]), x2 = Tag::Load(p[half + i]);
    const float a = x1 * c, b = x2 * s, u = x2 * c, v = x1 * s;
    p[i] = Tag::Store(a - b);
    p[half + i] = Tag::Store(u + v);
  }
}

template <typename P>
void RopeTensor(CudaQueue& cq, const Tensor& x, const P* positions, const float* cache, int64_t max_pos, int64_t D) {
  const int64_t T = x.dim(0), heads = x.dim(1) / D, half = D / 2;
  const int64_t n = T * heads * half;
  if (n == 0) return;
  DispatchFloat(x.dtype(), "RotaryEmbedding", [&](auto tag) {
    using Tag = decltype(tag);
    RopeKernel<Tag, P><<<GridFor(n, 256, cq), 256, 0, cq.stream>>>(
        x.data_as<typename Tag::T>(), T, heads, half, positions, cache, max_pos, cq.index_errors);
    VT_CUDA_CHECK_LAUNCH("RopeKernel");
  });
}

void RotaryEmbeddingCuda(const Queue& q, const Tensor& positions, const Tensor& query, const Tensor* key,
                         const Tensor& cos_sin_cache, int64_t head_size) {
  CudaQueue& cq = Cuda(q);
  const int64_t max_pos = cos_sin_cache.dim(0);
  DeviceGuard guard(cq.device.index);
  const float* cache = cos_sin_cache.data_as<float>();
  for (const Tensor* x : {&query, key}) {
    if (x == nullptr) continue;
    if (positions.dtype() == DType::kI32)
      RopeTensor(cq, *x, positions.data_as<int32_t>(), cache, max_pos, head_size);
    else
      RopeTensor(cq, *x, positions.data_as<int64_t>(), cache, max_pos, head_size);
  }
}

}  // namespace

void RegisterRopeKernels() { Register<OpId::kRotaryEmbedding>(DeviceType::kCUDA, &RotaryEmbeddingCuda); }

}  // namespace vt::cuda
