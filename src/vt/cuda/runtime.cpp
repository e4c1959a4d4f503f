// CUDA runtime of vt: the caching allocator, copies, queues, device count, registration.
#include "vt/cuda/runtime.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "vt/cuda/context.h"
#include "vt/cuda/device_error.h"
#include "vt/cuda/kernels.h"
#include "vt/registry.h"

namespace vt {

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

DeviceMemory CudaMemoryInfo(int index) {
  VT_CHECK(index >= 0 && index < CudaDeviceCount(), "CudaMemoryInfo: no CUDA device ", index, " (", CudaDeviceCount(),
           " visible)");
  cuda::DeviceGuard guard(index);
  DeviceMemory m;
  VT_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

namespace cuda {

namespace detail {
void ThrowCudaError(int code, const char* name, const char* text, const char* stmt, const char* file, int line) {
  std::string f = file;
  const size_t at = f.rfind("src/vt/");
  if (at != std::string::npos) f = f.substr(at);
  throw Error(StrCat("CUDA error ", name, " (", code, ": ", text, ") in `", stmt, "` at ", f, ":", line));
}
}  // namespace detail

DeviceGuard::DeviceGuard(int device) {
  VT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) VT_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

namespace {

// ---- caching allocator -----------------------------------------------------------------

// Freed blocks are kept per device, by size, and handed out again for requests of up to
// their size (at most a quarter larger than asked). Requests round up to 512 bytes, and
// from 1 MiB up to 2 MiB, so repeated shapes reuse blocks exactly.
class CachingAllocator {
 public:
  static CachingAllocator& Get() {
    static auto* a = new CachingAllocator();  // never destroyed: tensors may outlive statics
    return *a;
  }

  void* Allocate(int device, size_t nbytes, size_t* block_size) {
    const size_t size = Round(nbytes);
    *block_size = size;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& pool = Pool(device);
      auto it = pool.lower_bound(size);
      if (it != pool.end() && it->first <= size + size / 4) {
        *block_size = it->first;
        void* p = it->second;
        pool.erase(it);
        return p;
      }
    }
    DeviceGuard guard(device);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      ReleaseCached(device);
      e = cudaMalloc(&p, size);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw Error(StrCat("out of CUDA memory on cuda:", device, " allocating ", nbytes, " bytes (", free_b,
                         " of ", total_b, " bytes free)"));
    }
    VT_CUDA_CHECK(e);
    return p;
  }

  void Free(int device, void* p, size_t block_size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(device) < keep_.size() && keep_[device] != nullptr) {
      keep_[device]->emplace_back(p, block_size);
      return;
    }
    Pool(device).emplace(block_size, p);
  }

  void Keep(int device, KeptBlocks* keep) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(device) >= keep_.size()) keep_.resize(device + 1, nullptr);
    keep_[device] = keep;
  }

  void Return(int device, KeptBlocks& blocks) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, size] : blocks) Pool(device).emplace(size, p);
    blocks.clear();
  }

 private:
  static size_t Round(size_t n) {
    if (n == 0) n = 1;
    if (n < (size_t{1} << 20)) return (n + 511) / 512 * 512;
    const size_t m = size_t{2} << 20;
    return (n + m - 1) / m * m;
  }

  std::multimap<size_t, void*>& Pool(int device) {
    if (static_cast<size_t>(device) >= pools_.size()) pools_.resize(device + 1);
    return pools_[device];
  }

  void ReleaseCached(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [size, p] : Pool(device)) (void)cudaFree(p);
    Pool(device).clear();
  }

  std::mutex mu_;
  std::vector<std::multimap<size_t, void*>> pools_;
  std::vector<KeptBlocks*> keep_;  // per device: where freed blocks go while a graph records
};

// ---- pinned staging for large host-to-device copies ------------------------------------

constexpr size_t kStagingChunk = size_t{8} << 20;
constexpr size_t kStagingThreshold = size_t{4} << 20;

struct Staging {
  std::mutex mu;
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
};

Staging& GetStaging() {
  static auto* s = new Staging();
  return *s;
}

void StagedHostToDevice(void* dst, const void* src, size_t n) {
  Staging& s = GetStaging();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.buf[0] == nullptr) {
    for (int i = 0; i < 2; ++i) {
      VT_CUDA_CHECK(cudaHostAlloc(&s.buf[i], kStagingChunk, cudaHostAllocDefault));
      VT_CUDA_CHECK(cudaEventCreateWithFlags(&s.done[i], cudaEventDisableTiming));
    }
  }
  size_t off = 0;
  for (int i = 0; off < n; ++i) {
    const int b = i & 1;
    const size_t len = std::min(kStagingChunk, n - off);
    VT_CUDA_CHECK(cudaEventSynchronize(s.done[b]));  // the buffer's previous copy is done
    std::memcpy(s.buf[b], static_cast<const char*>(src) + off, len);
    VT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, s.buf[b], len, cudaMemcpyHostToDevice,
                                  cudaStreamLegacy));
    VT_CUDA_CHECK(cudaEventRecord(s.done[b], cudaStreamLegacy));
    off += len;
  }
  VT_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

}  // namespace

namespace {

struct IndexErrorState {
  std::mutex mu;
  std::map<int, IndexErrorRecord*> records;  // per device; never freed (one per process)
};

IndexErrorState& ErrorState() {
  static auto* s = new IndexErrorState();
  return *s;
}

std::string DescribeIndexError(const IndexErrorRecord& r, int device) {
  std::string what;
  switch (static_cast<IndexError>(r.code)) {
    case IndexError::kEmbeddingId:
      what = StrCat("Embedding: ids[", r.index, "] = ", r.value, " is outside the table's ", r.bound, " rows");
      break;
    case IndexError::kRopePosition:
      what = StrCat("RotaryEmbedding: positions[", r.index, "] = ", r.value, " is outside the cos/sin cache's ",
                    r.bound, " positions");
      break;
    case IndexError::kKvSlot:
      what = StrCat("KvCacheWrite: slot_mapping[", r.index, "] = ", r.value, " but the cache has ", r.bound,
                    " slots");
      break;
    case IndexError::kAttnQueryStartRange:
      what = StrCat("PagedAttention: query_start_loc must run from 0 to the ", r.bound,
                    " query rows, got query_start_loc[", r.index, "] = ", r.value);
      break;
    case IndexError::kAttnQueryStartOrder:
      what = StrCat("PagedAttention: query_start_loc decreases at sequence ", r.index, " (", r.aux, " -> ", r.value,
                    ")");
      break;
    case IndexError::kAttnQueryRows:
      what = StrCat("PagedAttention: sequence ", r.index, " has ", r.aux, " new query rows but seq_lens[", r.index,
                    "] = ", r.value);
      break;
    case IndexError::kAttnSeqLen:
      what = StrCat("PagedAttention: seq_lens[", r.index, "] = ", r.value, " exceeds its ", r.bound,
                    " block-table entries of ", r.aux, " tokens");
      break;
    case IndexError::kAttnBlockId:
      what = StrCat("PagedAttention: block_tables[", r.index, ", ", r.aux, "] = ", r.value,
                    " is outside the cache's ", r.bound, " blocks");
      break;
    case IndexError::kMoeExpertId:
      what = StrCat("MoeExperts(Fp8): expert id ", r.value, " (ids element ", r.index, ") is outside [0, ", r.bound, ")");
      break;
    case IndexError::kGdnQueryStart:
      what = StrCat("CausalConv1d/GatedDeltaRule: query_start[", r.index, "] = ", r.value,
                    " breaks 0 = query_start[0] <= ... <= query_start[S] = ", r.bound, " (the entry before is ", r.aux,
                    ")");
      break;
    case IndexError::kGdnStateSlot:
      what = StrCat("CausalConv1d/GatedDeltaRule: state_slots[", r.index, "] = ", r.value, " is outside [-1, ", r.bound,
                    ")");
      break;
    default:
      what = StrCat("a CUDA kernel recorded index error code ", r.code);
  }
  return StrCat(what, " (found by the kernel on cuda:", device,
                " and reported at this synchronization; that op's output is unspecified)");
}

}  // namespace

IndexErrorRecord* IndexErrors(int device) {
  IndexErrorState& st = ErrorState();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.records.find(device);
  if (it != st.records.end()) return it->second;
  DeviceGuard guard(device);
  IndexErrorRecord* p = nullptr;
  VT_CUDA_CHECK(cudaMalloc(&p, sizeof(IndexErrorRecord)));
  VT_CUDA_CHECK(cudaMemset(p, 0, sizeof(IndexErrorRecord)));
  st.records[device] = p;
  return p;
}

void ThrowPendingIndexError(int device) {
  IndexErrorRecord* p = nullptr;
  {
    IndexErrorState& st = ErrorState();
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.records.find(device);
    if (it == st.records.end()) return;
    p = it->second;
  }
  DeviceGuard guard(device);
  IndexErrorRecord r{};
  VT_CUDA_CHECK(cudaMemcpy(&r, p, sizeof r, cudaMemcpyDeviceToHost));
  if (r.code == 0) return;
  VT_CUDA_CHECK(cudaMemset(p, 0, sizeof r));
  throw Error(DescribeIndexError(r, device));
}

void KeepFreedBlocks(int device, KeptBlocks* keep) { CachingAllocator::Get().Keep(device, keep); }
void ReturnBlocks(int device, KeptBlocks& blocks) { CachingAllocator::Get().Return(device, blocks); }

std::shared_ptr<Storage> AllocateStorage(int device, size_t nbytes) {
  const int count = CudaDeviceCount();
  VT_CHECK(device >= 0 && device < count, "Tensor::Empty on cuda:", device, ": no such CUDA device (", count,
           " visible)");
  auto s = std::make_shared<Storage>();
  s->device = Device::Cuda(device);
  s->nbytes = nbytes;
  if (nbytes == 0) return s;
  size_t block = 0;
  void* p = CachingAllocator::Get().Allocate(device, nbytes, &block);
  s->data = p;
  s->owner = std::shared_ptr<void>(p, [device, block](void* q) { CachingAllocator::Get().Free(device, q, block); });
  return s;
}

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (n == 0) return;
  DeviceGuard guard(dst_device.is_cuda() ? dst_device.index : src_device.index);
  if (dst_device.is_cuda() && src_device.is_cpu()) {
    if (n >= kStagingThreshold) {
      StagedHostToDevice(dst, src, n);
    } else {
      VT_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
    }
  } else if (dst_device.is_cpu()) {
    VT_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
    ThrowPendingIndexError(src_device.index);
  } else {
    VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cudaStreamLegacy));
    VT_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
}

bool SwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string_view(v) != "0";
}

bool OverlappedLaunches(const CudaQueue& cq) {
  static const bool enabled = SwitchOn("VT_CUDA_PDL");
  return enabled && cq.cc_major >= 9;
}

void SynchronizeDevice(int device) {
  DeviceGuard guard(device);
  VT_CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- queues ------------------------------------------------------------------------------

CudaQueue::CudaQueue(int index) : Queue::Impl(Device::Cuda(index)) {
  DeviceGuard guard(index);
  // A blocking stream: it synchronises with the legacy default stream that copies use, so a
  // copy never races a kernel of this queue on the same bytes.
  VT_CUDA_CHECK(cudaStreamCreate(&stream));
  index_errors = IndexErrors(index);
  VT_CUDA_CHECK(cudaMalloc(&split_counters, kSplitCounters * sizeof(int32_t)));
  VT_CUDA_CHECK(cudaMemset(split_counters, 0, kSplitCounters * sizeof(int32_t)));
  cudaDeviceProp prop{};
  VT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  sm_count = prop.multiProcessorCount;
  cc_major = prop.major;
  cc_minor = prop.minor;
  smem_per_block_optin = prop.sharedMemPerBlockOptin;
#ifdef VT_CUDA_CUBLASLT
  const cublasStatus_t st = cublasLtCreate(&lt);
  VT_CHECK(st == CUBLAS_STATUS_SUCCESS, "Queue::Cuda(", index, "): cublasLtCreate failed with status ",
           static_cast<int>(st));
  workspace_bytes = size_t{32} << 20;
  VT_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
#endif
}

CudaQueue::~CudaQueue() {
  const int previous = [] {
    int d = 0;
    (void)cudaGetDevice(&d);
    return d;
  }();
  (void)cudaSetDevice(device.index);
  (void)cudaStreamSynchronize(stream);
#ifdef VT_CUDA_CUBLASLT
  if (lt) (void)cublasLtDestroy(lt);
  if (workspace) (void)cudaFree(workspace);
#endif
  if (split_counters) (void)cudaFree(split_counters);
  if (stream) (void)cudaStreamDestroy(stream);
  (void)cudaSetDevice(previous);
}

void CudaQueue::Synchronize() {
  DeviceGuard guard(device.index);
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
  ThrowPendingIndexError(device.index);
}

CudaQueue& Cuda(const Queue& q) {
  auto* impl = dynamic_cast<CudaQueue*>(q.impl());
  VT_CHECK(impl != nullptr, "internal: a CUDA kernel received a queue on ", ToString(q.device()));
  return *impl;
}

void* NativeStream(const Queue& q) { return Cuda(q).stream; }

std::shared_ptr<Queue::Impl> MakeQueue(int index) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(StrCat("Queue::Cuda(", index, "): no CUDA device cuda:", index, " (", cudaGetErrorName(e), ": ",
                       cudaGetErrorString(e), ")"));
  }
  VT_CHECK(index >= 0 && index < count, "Queue::Cuda(", index, "): no CUDA device cuda:", index, " (", count,
           " device(s) visible)");
  return std::make_shared<CudaQueue>(index);
}

void RegisterKernels() {
  RegisterQuantKernels();
  RegisterNormKernels();
  RegisterActivationKernels();
  RegisterCastKernels();
  RegisterFusedKernels();
  RegisterFusedGroupQuantKernels();
  RegisterMatmulKernels();
  RegisterEmbeddingKernels();
  RegisterRopeKernels();
  RegisterQkNormRopeKernels();
  RegisterAttentionKernels();
  RegisterSamplingKernels();
  RegisterMoeKernels();
  RegisterMoeGroupScaledKernels();
  RegisterGdnKernels();
}

}  // namespace cuda
}  // namespace vt
