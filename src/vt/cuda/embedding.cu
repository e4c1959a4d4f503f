// CUDA Embedding: a row gather of the table, converted to out's dtype with the CPU's
// conversions (vt/dtype.h), raw bytes when the dtypes match. The kernel checks each id:
// one outside the table is never read, and is reported as a vt::Error naming its position
// at the next synchronization (device_error.h).
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/embedding.h"

namespace vt::cuda {

namespace {

// Copies `row_words` words of type W per row: out row t <- table row ids[t].
// The id of row t, or -1 (recorded once per row) when it is outside the V table rows.
__device__ __forceinline__ int64_t CheckedId(const int32_t* ids, int64_t t, int64_t i, int64_t V,
                                             IndexErrorRecord* err) {
  const int64_t id = ids[t];
  if (id >= 0 && id < V) return id;
  if (i == 0) RecordIndexError(err, IndexError::kEmbeddingId, t, id, V);
  return -1;
}

template <typename W>
__global__ void GatherRowsKernel(W* out, const W* table, const int32_t* ids, int64_t T, int64_t V,
                                 int64_t row_words, IndexErrorRecord* err) {
  const int64_t n = T * row_words;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t t = e / row_words, i = e - t * row_words;
    const int64_t id = CheckedId(ids, t, i, V, err);
    if (id >= 0) out[e] = table[id * row_words + i];
  }
}

__global__ void GatherConvertKernel(void* out, DType od, const void* table, DType td, const int32_t* ids, int64_t T,
                                    int64_t V, int64_t H, IndexErrorRecord* err) {
  const int64_t n = T * H;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t t = e / H, i = e - t * H;
    const int64_t id = CheckedId(ids, t, i, V, err);
    if (id >= 0) StoreAny(out, od, e, LoadAny(table, td, id * H + i));
  }
}

template <typename W>
void LaunchGather(CudaQueue& cq, void* out, const void* table, const int32_t* ids, int64_t T, int64_t V,
                  int64_t row_bytes) {
  const int64_t words = row_bytes / static_cast<int64_t>(sizeof(W));
  GatherRowsKernel<W><<<GridFor(T * words, 256, cq), 256, 0, cq.stream>>>(
      static_cast<W*>(out), static_cast<const W*>(table), ids, T, V, words, cq.index_errors);
  VT_CUDA_CHECK_LAUNCH("GatherRowsKernel");
}

void EmbeddingCuda(const Queue& q, const Tensor& out, const Tensor& table, const Tensor& ids) {
  CudaQueue& cq = Cuda(q);
  const int64_t T = ids.dim(0), V = table.dim(0), H = table.dim(1);
  if (T == 0 || H == 0) return;
  DeviceGuard guard(cq.device.index);
  const auto* pid = ids.data_as<int32_t>();
  if (out.dtype() != table.dtype()) {
    GatherConvertKernel<<<GridFor(T * H, 256, cq), 256, 0, cq.stream>>>(
        out.data(), out.dtype(), table.data(), table.dtype(), pid, T, V, H, cq.index_errors);
    VT_CUDA_CHECK_LAUNCH("GatherConvertKernel");
    return;
  }
  const int64_t row_bytes = H * static_cast<int64_t>(DTypeSize(table.dtype()));
  const auto aligned = [&](size_t a) {
    return row_bytes % static_cast<int64_t>(a) == 0 && reinterpret_cast<uintptr_t>(out.data()) % a == 0 &&
           reinterpret_cast<uintptr_t>(table.data()) % a == 0;
  };
  if (aligned(16)) {
    LaunchGather<uint4>(cq, out.data(), table.data(), pid, T, V, row_bytes);
  } else if (aligned(4)) {
    LaunchGather<uint32_t>(cq, out.data(), table.data(), pid, T, V, row_bytes);
  } else {
    LaunchGather<uint16_t>(cq, out.data(), table.data(), pid, T, V, row_bytes);
  }
}

}  // namespace

void RegisterEmbeddingKernels() { Register<OpId::kEmbedding>(DeviceType::kCUDA, &EmbeddingCuda); }

}  // namespace vt::cuda
