// The NCCL communicator (vt/comm.h), built only with CUDA. NCCL is loaded with dlopen at
// run time (libnccl.so.2, or the file VTLLM_NCCL_LIBRARY names), so neither the build nor a
// binary that never splits a model depends on it; nccl.h supplies the types only.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "vt/comm.h"
#include "vt/cuda/context.h"
#include "vt/error.h"

namespace vt {

namespace {

// The NCCL entry points vtllm uses, resolved once per process.
struct NcclApi {
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclCommInitAll) CommInitAll = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
};

const NcclApi& Nccl() {
  static NcclApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("VTLLM_NCCL_LIBRARY");
    const std::string lib = env != nullptr && *env != '\0' ? env : "libnccl.so.2";
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      error = StrCat("tensor parallelism on CUDA needs NCCL, but '", lib, "' could not be loaded (",
                     why != nullptr ? why : "unknown error",
                     "); install NCCL 2 or set VTLLM_NCCL_LIBRARY to the path of libnccl.so");
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr && error.empty()) error = StrCat("'", lib, "' has no symbol ", name, " (not NCCL 2?)");
    };
    sym(api.GetErrorString, "ncclGetErrorString");
    sym(api.CommInitAll, "ncclCommInitAll");
    sym(api.CommDestroy, "ncclCommDestroy");
    sym(api.AllReduce, "ncclAllReduce");
    sym(api.AllGather, "ncclAllGather");
  });
  if (!error.empty()) throw Error(error);
  return api;
}

void Check(ncclResult_t r, const char* stmt, const char* file, int line) {
  if (r != ncclSuccess)
    throw Error(StrCat("NCCL error ", static_cast<int>(r), " (", Nccl().GetErrorString(r), ") in ", stmt, " at ",
                       file, ":", line));
}
#define VT_NCCL_CHECK(stmt) Check((stmt), #stmt, __FILE__, __LINE__)

ncclDataType_t NcclType(DType dt, const char* op) {
  switch (dt) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    default: throw Error(StrCat(op, ": ", DTypeName(dt), " is not supported (F32, BF16 or F16)"));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) (void)Nccl().CommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "nccl"; }

  void AllReduceSum(const Queue& q, const Tensor& x) override {
    CheckArg(q, x, "AllReduceSum", "x");
    const ncclDataType_t t = NcclType(x.dtype(), "AllReduceSum");
    ++num_collectives_;
    cuda::DeviceGuard guard(device_);
    VT_NCCL_CHECK(Nccl().AllReduce(x.data(), x.data(), static_cast<size_t>(x.numel()), t, ncclSum, comm_,
                                   cuda::Cuda(q).stream));
  }

  void AllGatherColumns(const Queue& q, const Tensor& in, const Tensor& out) override {
    CheckArg(q, in, "AllGatherColumns", "in");
    CheckArg(q, out, "AllGatherColumns", "out");
    VT_CHECK(in.ndim() == 2 && out.ndim() == 2 && out.dim(0) == in.dim(0) && out.dim(1) == in.dim(1) * size_ &&
                 out.dtype() == in.dtype(),
             "AllGatherColumns: in ", in.Describe(), " and out ", out.Describe(), " for ", size_, " ranks");
    const ncclDataType_t t = NcclType(in.dtype(), "AllGatherColumns");
    ++num_collectives_;
    const int64_t R = in.dim(0), C = in.dim(1);
    const size_t es = DTypeSize(in.dtype());
    // NCCL gathers the ranks' buffers one after the other, [size, R, C]; each rank's block is
    // then copied into its columns of out.
    if (!scratch_.defined() || scratch_.numel() < static_cast<int64_t>(size_ * R * C * es))
      scratch_ = Tensor::Empty({static_cast<int64_t>(size_ * R * C * es)}, DType::kU8, out.device());
    cuda::DeviceGuard guard(device_);
    const cudaStream_t s = cuda::Cuda(q).stream;
    VT_NCCL_CHECK(Nccl().AllGather(in.data(), scratch_.data(), static_cast<size_t>(R * C), t, comm_, s));
    char* dst = static_cast<char*>(out.data());
    const char* src = static_cast<const char*>(scratch_.data());
    for (int r = 0; r < size_; ++r)
      VT_CUDA_CHECK(cudaMemcpy2DAsync(dst + r * C * es, size_ * C * es, src + r * R * C * es, C * es, C * es,
                                      static_cast<size_t>(R), cudaMemcpyDeviceToDevice, s));
  }

 private:
  void CheckArg(const Queue& q, const Tensor& t, const char* op, const char* arg) const {
    const Device d{DeviceType::kCUDA, device_};
    VT_CHECK(q.device() == d && t.device() == d, op, ": NCCL rank ", rank_, " runs on ", ToString(d), ", but ", arg,
             " is on ", ToString(t.device()), " and the queue on ", ToString(q.device()));
    VT_CHECK(t.is_contiguous(), op, ": ", arg, " must be contiguous, got ", t.Describe());
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
  Tensor scratch_;  // the all-gather's [size, R, C] bytes
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> MakeNcclGroup(std::span<const int> devices) {
  VT_CHECK(!devices.empty(), "MakeNcclGroup: no devices");
  const NcclApi& api = Nccl();
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  VT_NCCL_CHECK(api.CommInitAll(comms.data(), n, devices.data()));
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_shared<NcclCommunicator>(comms[static_cast<size_t>(r)], r, n, devices[static_cast<size_t>(r)]));
  return out;
}

}  // namespace vt
