// CPU RotaryEmbedding (neox style: each head's two halves rotated as pairs) with cos/sin
// read from the f32 cache row of each token's position: the vector kernel of the queue's
// ISA (elementwise_simd.h), or the scalar reference; tokens are split across the pool.
#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/rope.h"

namespace vt::cpu {

namespace {

int64_t PositionAt(const Tensor& positions, int64_t t) {
  return positions.dtype() == DType::kI32 ? positions.data_as<int32_t>()[t] : positions.data_as<int64_t>()[t];
}

void RotaryEmbeddingCpu(const Queue& q, const Tensor& positions, const Tensor& query, const Tensor* key,
                        const Tensor& cos_sin_cache, int64_t head_size) {
  const int64_t T = positions.dim(0), max_pos = cos_sin_cache.dim(0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = PositionAt(positions, t);
    VT_CHECK(p >= 0 && p < max_pos, "RotaryEmbedding: positions[", t, "] = ", p, " is outside the cos/sin cache's ",
             max_pos, " positions");
  }
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  auto rotate = [&](const Tensor& x, int64_t t, const float* c, const float* s) {
    if (vec == nullptr) return ref::RotaryEmbeddingRow(x, t, head_size, c, s);
    const int64_t width = x.dim(1);
    void* row = static_cast<char*>(x.data()) + t * width * static_cast<int64_t>(DTypeSize(x.dtype()));
    vec->rope_row(row, x.dtype(), width / head_size, head_size, c, s);
  };
  const float* cache = cos_sin_cache.data_as<float>();
  cpu.pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cache + PositionAt(positions, t) * head_size;
      const float* s = c + head_size / 2;
      rotate(query, t, c, s);
      if (key != nullptr) rotate(*key, t, c, s);
    }
  });
}

}  // namespace

void RegisterRopeKernels() { Register<OpId::kRotaryEmbedding>(DeviceType::kCPU, &RotaryEmbeddingCpu); }

}  // namespace vt::cpu
