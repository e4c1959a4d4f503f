// CPU Embedding: rows of the table gathered by token id, converted to out's dtype where
// the two differ.
#include <cstring>

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/ops/embedding.h"

namespace vt::cpu {

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

}  // namespace

void RegisterEmbeddingKernels() { Register<OpId::kEmbedding>(DeviceType::kCPU, &EmbeddingCpu); }

}  // namespace vt::cpu
