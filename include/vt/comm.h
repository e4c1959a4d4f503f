// Collectives among the ranks of a tensor-parallel group (vLLM's GroupCoordinator): each
// rank runs its shard of a model and calls the same collectives in the same order.
//
// A collective is not an op of the registry: it is bound to a group (which ranks, which
// devices), not to one device, so a group is made once and each rank keeps its
// communicator. The rules of dispatch still hold: every tensor must live on the device of
// the communicator's rank and of the queue (no cross-device copy hides in a collective),
// and a group of one kind refuses another kind's tensors with a vt::Error.
//
//   InProcess: the ranks are threads of one process over CPU memory; each collective meets
//   at a barrier and every rank sums the ranks' buffers in rank order with f32
//   accumulation, so the result is the same on every rank and does not depend on timing.
//   Nccl: one CUDA device per rank (threads of one process), NCCL loaded at run time with
//   dlopen (libnccl.so.2, or the file named by VTLLM_NCCL_LIBRARY); the collectives are
//   enqueued on the queue's stream (a recorded graph captures them).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* kind() const = 0;  // "in-process" or "nccl"

  // x (contiguous F32, BF16 or F16, the same shape on every rank) becomes the sum over the
  // ranks of x, in place, on every rank.
  virtual void AllReduceSum(const Queue& q, const Tensor& x) = 0;
  // in: [R, C] contiguous on every rank; out: [R, size() * C] contiguous, rank r's `in` in
  // columns [r*C, (r+1)*C) (the vocabulary-parallel logits put side by side).
  virtual void AllGatherColumns(const Queue& q, const Tensor& in, const Tensor& out) = 0;

  // Collectives this rank has entered (for tests: proof that a sharded path ran).
  int64_t num_collectives() const { return num_collectives_; }

 protected:
  int64_t num_collectives_ = 0;
};

// `size` communicators of one in-process CPU group; communicator r is rank r, to be used by
// one thread each. A rank that leaves the group with an error should call AbortGroup so
// that the others, waiting at a collective, throw instead of waiting for ever.
std::vector<std::shared_ptr<Communicator>> MakeInProcessGroup(int size);
// Marks the group of `c` (from MakeInProcessGroup) broken: every rank waiting in or entering
// a collective throws vt::Error quoting `why`. No effect on other kinds.
void AbortGroup(Communicator& c, const std::string& why);

// One NCCL communicator per CUDA device of `devices` (rank r on devices[r]), created
// together (ncclCommInitAll). Throws vt::Error when vtllm was built without CUDA, or naming
// the library when NCCL cannot be loaded.
std::vector<std::shared_ptr<Communicator>> MakeNcclGroup(std::span<const int> devices);

}  // namespace vt
