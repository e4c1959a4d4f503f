// CPU RotaryEmbedding (neox style: each head's two halves rotated as pairs) with cos/sin
// read from the f32 cache row of each token's position.
#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/ops/rope.h"

namespace vt::cpu {

namespace {

int64_t PositionAt(const Tensor& positions, int64_t t) {
  return positions.dtype() == DType::kI32 ? positions.data_as<int32_t>()[t] : positions.data_as<int64_t>()[t];
}

// Rotates the heads of one token row x[0 .. heads*D) with cos c[0..D/2) and sin s[0..D/2).
template <typename T, typename Load, typename Store>
void RotateRow(T* x, int64_t heads, int64_t D, const float* c, const float* s, Load load, Store store) {
  const int64_t half = D / 2;
  for (int64_t h = 0; h < heads; ++h) {
    T* p = x + h * D;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = load(p[i]), x2 = load(p[half + i]);
      p[i] = store(x1 * c[i] - x2 * s[i]);
      p[half + i] = store(x2 * c[i] + x1 * s[i]);
    }
  }
}

void RotateTensorRow(const Tensor& x, int64_t t, int64_t D, const float* c, const float* s) {
  const int64_t width = x.dim(1), heads = width / D;
  switch (x.dtype()) {
    case DType::kF32:
      RotateRow(x.data_as<float>() + t * width, heads, D, c, s, [](float v) { return v; },
                [](float v) { return v; });
      break;
    case DType::kBF16:
      RotateRow(x.data_as<uint16_t>() + t * width, heads, D, c, s, [](uint16_t v) { return Bf16ToFloat(v); },
                [](float v) { return FloatToBf16(v); });
      break;
    case DType::kF16:
      RotateRow(x.data_as<uint16_t>() + t * width, heads, D, c, s, [](uint16_t v) { return F16ToFloat(v); },
                [](float v) { return FloatToF16(v); });
      break;
    default: throw Error(StrCat("internal: RotaryEmbedding of ", DTypeName(x.dtype())));
  }
}

void RotaryEmbeddingCpu(const Queue& q, const Tensor& positions, const Tensor& query, const Tensor* key,
                        const Tensor& cos_sin_cache, int64_t head_size) {
  const int64_t T = positions.dim(0), max_pos = cos_sin_cache.dim(0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = PositionAt(positions, t);
    VT_CHECK(p >= 0 && p < max_pos, "RotaryEmbedding: positions[", t, "] = ", p, " is outside the cos/sin cache's ",
             max_pos, " positions");
  }
  const float* cache = cos_sin_cache.data_as<float>();
  Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cache + PositionAt(positions, t) * head_size;
      const float* s = c + head_size / 2;
      RotateTensorRow(query, t, head_size, c, s);
      if (key != nullptr) RotateTensorRow(*key, t, head_size, c, s);
    }
  });
}

}  // namespace

void RegisterRopeKernels() { Register<OpId::kRotaryEmbedding>(DeviceType::kCPU, &RotaryEmbeddingCpu); }

}  // namespace vt::cpu
