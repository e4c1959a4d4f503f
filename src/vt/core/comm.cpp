// The in-process communicator (vt/comm.h): ranks are threads sharing CPU memory.
#include "vt/comm.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "vt/dtype.h"
#include "vt/error.h"

namespace vt {

namespace {

// What each rank posts for a collective: its buffer and the shape it expects.
struct Post {
  const void* data = nullptr;
  Shape shape;
  DType dtype = DType::kF32;
};

// The group's shared state: a reusable barrier (by generation) that can be broken.
struct InProcessGroup {
  explicit InProcessGroup(int n) : size(n), posts(static_cast<size_t>(n)) {}

  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    if (!broken.empty()) throw Error("tensor-parallel group: " + broken);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || !broken.empty(); });
    if (generation == gen) throw Error("tensor-parallel group: " + broken);
  }
  void Abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (broken.empty()) broken = why.empty() ? "a rank failed" : why;
    cv.notify_all();
  }

  const int size;
  std::vector<Post> posts;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::string broken;
};

float Load(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default: return F16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
}

void Store(void* p, DType dt, int64_t i, float v) {
  switch (dt) {
    case DType::kF32: static_cast<float*>(p)[i] = v; return;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = FloatToBf16(v); return;
    default: static_cast<uint16_t*>(p)[i] = FloatToF16(v); return;
  }
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size; }
  const char* kind() const override { return "in-process"; }
  void Abort(const std::string& why) { g_->Abort(why); }

  void AllReduceSum(const Queue& q, const Tensor& x) override {
    Check(q, x, "AllReduceSum", "x");
    VT_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16 || x.dtype() == DType::kF16,
             "AllReduceSum: x is ", x.Describe(), "; F32, BF16 or F16 only");
    ++num_collectives_;
    Meet(x);
    // Every rank sums all ranks' buffers in rank order into its own scratch, then (after
    // all have read) writes it back: the same f32 sum, rounded once, on every rank.
    const int64_t n = x.numel();
    scratch_.resize(static_cast<size_t>(n));
    const DType dt = x.dtype();
    q.ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float s = Load(g_->posts[0].data, dt, i);
        for (int r = 1; r < g_->size; ++r) s += Load(g_->posts[static_cast<size_t>(r)].data, dt, i);
        scratch_[static_cast<size_t>(i)] = s;
      }
    });
    g_->Wait();
    void* dst = x.data();
    q.ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) Store(dst, dt, i, scratch_[static_cast<size_t>(i)]);
    });
  }

  void AllGatherColumns(const Queue& q, const Tensor& in, const Tensor& out) override {
    Check(q, in, "AllGatherColumns", "in");
    Check(q, out, "AllGatherColumns", "out");
    VT_CHECK(in.ndim() == 2 && out.ndim() == 2 && out.dim(0) == in.dim(0) && out.dim(1) == in.dim(1) * size() &&
                 out.dtype() == in.dtype(),
             "AllGatherColumns: in ", in.Describe(), " and out ", out.Describe(), " for ", size(), " ranks");
    ++num_collectives_;
    Meet(in);
    const int64_t R = in.dim(0), C = in.dim(1);
    const size_t es = DTypeSize(in.dtype());
    char* dst = static_cast<char*>(out.data());
    for (int r = 0; r < size(); ++r) {
      const char* src = static_cast<const char*>(g_->posts[static_cast<size_t>(r)].data);
      for (int64_t row = 0; row < R; ++row)
        std::memcpy(dst + (row * C * size() + r * C) * es, src + row * C * es, static_cast<size_t>(C) * es);
    }
    g_->Wait();  // nobody reuses `in` before every rank has read it
  }

 private:
  static void Check(const Queue& q, const Tensor& t, const char* op, const char* arg) {
    VT_CHECK(q.device().is_cpu() && t.device().is_cpu(), op, ": the in-process group runs on CPU, but ", arg,
             " is on ", ToString(t.device()), " and the queue on ", ToString(q.device()));
    VT_CHECK(t.is_contiguous(), op, ": ", arg, " must be contiguous, got ", t.Describe());
  }
  // Posts this rank's buffer, waits for all, and checks that every rank posted the same.
  void Meet(const Tensor& t) {
    g_->posts[static_cast<size_t>(rank_)] = {t.data(), t.shape(), t.dtype()};
    g_->Wait();
    for (const Post& p : g_->posts)
      VT_CHECK(p.shape == t.shape() && p.dtype == t.dtype(), "tensor-parallel collective: rank ", rank_,
               " has ", t.Describe(), " but another rank a different shape or dtype");
  }

  std::shared_ptr<InProcessGroup> g_;
  int rank_;
  std::vector<float> scratch_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> MakeInProcessGroup(int size) {
  VT_CHECK(size >= 1, "MakeInProcessGroup: size ", size, " must be >= 1");
  auto g = std::make_shared<InProcessGroup>(size);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<InProcessCommunicator>(g, r));
  return out;
}

void AbortGroup(Communicator& c, const std::string& why) {
  if (auto* ip = dynamic_cast<InProcessCommunicator*>(&c)) ip->Abort(why);
}

#ifndef VT_WITH_NCCL
std::vector<std::shared_ptr<Communicator>> MakeNcclGroup(std::span<const int> devices) {
#ifdef VT_WITH_CUDA
  throw Error(StrCat("NCCL tensor parallelism over ", devices.size(),
                     " CUDA devices: vtllm was built without nccl.h (see the CMake output's NCCL line)"));
#else
  throw Error(StrCat("NCCL tensor parallelism over ", devices.size(),
                     " CUDA devices: vtllm was built without CUDA (VT_CUDA=OFF)"));
#endif
}
#endif

}  // namespace vt
