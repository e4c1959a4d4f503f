// CPU kernels the model layer needs beyond linear algebra: embedding, rotary embedding and
// KV-cache writes. Paged attention is in attention.cpp.
#include <cstring>

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/ops/attention.h"
#include "vt/ops/embedding.h"
#include "vt/ops/rope.h"

namespace vt::cpu {

void RegisterAttentionKernels();  // attention.cpp

namespace {

void EmbeddingCpu(const Queue& q, const Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t T = ids.dim(0), V = table.dim(0), H = table.dim(1);
  const auto* pid = ids.data_as<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    VT_CHECK(pid[t] >= 0 && pid[t] < V, "Embedding: ids[", t, "] = ", pid[t], " is outside the table's ", V,
             " rows (table ", table.Describe(), ")");
  const size_t row_bytes = static_cast<size_t>(H) * DTypeSize(table.dtype());
  Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t src = static_cast<int64_t>(pid[t]) * H;
      if (out.dtype() == table.dtype()) {
        std::memcpy(static_cast<char*>(out.data()) + t * row_bytes,
                    static_cast<const char*>(table.data()) + src * DTypeSize(table.dtype()), row_bytes);
      } else {
        for (int64_t i = 0; i < H; ++i)
          StoreFloat(out.data(), out.dtype(), t * H + i, LoadFloat(table.data(), table.dtype(), src + i));
      }
    }
  });
}

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

void KvCacheWriteCpu(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                     const Tensor& value_cache, const Tensor& slot_mapping) {
  const int64_t T = slot_mapping.dim(0);
  const int64_t num_slots = key_cache.dim(0) * key_cache.dim(1);
  const auto* slots = slot_mapping.data_as<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    VT_CHECK(slots[t] < num_slots, "KvCacheWrite: slot_mapping[", t, "] = ", slots[t], " but the cache has ",
             num_slots, " slots (", key_cache.dim(0), " blocks of ", key_cache.dim(1), ")");
  const size_t row = static_cast<size_t>(key.dim(1)) * DTypeSize(key.dtype());
  Cpu(q).pool.ParallelFor(T, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (slots[t] < 0) continue;
      std::memcpy(static_cast<char*>(key_cache.data()) + slots[t] * row,
                  static_cast<const char*>(key.data()) + t * row, row);
      std::memcpy(static_cast<char*>(value_cache.data()) + slots[t] * row,
                  static_cast<const char*>(value.data()) + t * row, row);
    }
  });
}

}  // namespace

void RegisterModelKernels() {
  Register<OpId::kEmbedding>(DeviceType::kCPU, &EmbeddingCpu);
  Register<OpId::kRotaryEmbedding>(DeviceType::kCPU, &RotaryEmbeddingCpu);
  Register<OpId::kKvCacheWrite>(DeviceType::kCPU, &KvCacheWriteCpu);
  RegisterAttentionKernels();
}

}  // namespace vt::cpu
