// CUDA Embedding: a row gather of the table, converted to out's dtype with the CPU's
// conversions (vt/dtype.h), raw bytes when the dtypes match. The ids are validated on the
// host first, so an id outside the table is a vt::Error naming its position, never a
// wild read.
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/host_meta.h"
#include "vt/cuda/kernels.h"
#include "vt/ops/embedding.h"

namespace vt::cuda {

namespace {

// Copies `row_words` words of type W per row: out row t <- table row ids[t].
template <typename W>
__global__ void GatherRowsKernel(W* out, const W* table, const int32_t* ids, int64_t T, int64_t row_words) {
  const int64_t n = T * row_words;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t t = e / row_words, i = e - t * row_words;
    out[e] = table[static_cast<int64_t>(ids[t]) * row_words + i];
  }
}

__global__ void GatherConvertKernel(void* out, DType od, const void* table, DType td, const int32_t* ids, int64_t T,
                                    int64_t H) {
  const int64_t n = T * H;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t t = e / H, i = e - t * H;
    StoreAny(out, od, e, LoadAny(table, td, static_cast<int64_t>(ids[t]) * H + i));
  }
}

template <typename W>
void LaunchGather(CudaQueue& cq, void* out, const void* table, const int32_t* ids, int64_t T, int64_t row_bytes) {
  const int64_t words = row_bytes / static_cast<int64_t>(sizeof(W));
  GatherRowsKernel<W><<<GridFor(T * words, 256, cq), 256, 0, cq.stream>>>(
      static_cast<W*>(out), static_cast<const W*>(table), ids, T, words);
  VT_CUDA_CHECK_LAUNCH("GatherRowsKernel");
}

void EmbeddingCuda(const Queue& q, const Tensor& out, const Tensor& table, const Tensor& ids) {
  CudaQueue& cq = Cuda(q);
  const int64_t T = ids.dim(0), V = table.dim(0), H = table.dim(1);
  const std::vector<int32_t> host_ids = ReadToHost<int32_t>(cq, ids);
  for (int64_t t = 0; t < T; ++t)
    VT_CHECK(host_ids[t] >= 0 && host_ids[t] < V, "Embedding: ids[", t, "] = ", host_ids[t], " is outside the table's ",
             V, " rows (table ", table.Describe(), ")");
  if (T == 0 || H == 0) return;
  DeviceGuard guard(cq.device.index);
  const auto* pid = ids.data_as<int32_t>();
  if (out.dtype() != table.dtype()) {
    GatherConvertKernel<<<GridFor(T * H, 256, cq), 256, 0, cq.stream>>>(out.data(), out.dtype(), table.data(),
                                                                         table.dtype(), pid, T, H);
    VT_CUDA_CHECK_LAUNCH("GatherConvertKernel");
    return;
  }
  const int64_t row_bytes = H * static_cast<int64_t>(DTypeSize(table.dtype()));
  const auto aligned = [&](size_t a) {
    return row_bytes % static_cast<int64_t>(a) == 0 && reinterpret_cast<uintptr_t>(out.data()) % a == 0 &&
           reinterpret_cast<uintptr_t>(table.data()) % a == 0;
  };
  if (aligned(16)) {
    LaunchGather<uint4>(cq, out.data(), table.data(), pid, T, row_bytes);
  } else if (aligned(4)) {
    LaunchGather<uint32_t>(cq, out.data(), table.data(), pid, T, row_bytes);
  } else {
    LaunchGather<uint16_t>(cq, out.data(), table.data(), pid, T, row_bytes);
  }
}

}  // namespace

void RegisterEmbeddingKernels() { Register<OpId::kEmbedding>(DeviceType::kCUDA, &EmbeddingCuda); }

}  // namespace vt::cuda
