// The CPU backend: its queue, its kernel registration, and helpers its kernels share.
#pragma once

#include <memory>

#include "vt/cpu/thread_pool.h"
#include "vt/error.h"
#include "vt/queue.h"

namespace vt::cpu {

struct CpuQueue : Queue::Impl {
  CpuQueue(int threads, CpuIsa isa) : Queue::Impl(Device::Cpu()), pool(threads), isa(isa) {}
  ThreadPool pool;
  CpuIsa isa;  // effective level: min(detected, requested)
};

inline CpuQueue& Cpu(const Queue& q) {
  auto* impl = dynamic_cast<CpuQueue*>(q.impl());
  VT_CHECK(impl != nullptr, "internal: a CPU kernel received a queue on ", ToString(q.device()));
  return *impl;
}

// Registers every CPU kernel; called once from vt::EnsureBackendsRegistered.
void RegisterKernels();

// One registration function per op family of include/vt/ops (cpu/<family>.cpp; matmul in
// cpu/matmul/), each called once from RegisterKernels (backend.cpp).
void RegisterQuantKernels();
void RegisterMatmulKernels();  // and the preparer of fp8 matmul weights (vt::PrepareWeight)
void RegisterNormKernels();
void RegisterActivationKernels();
void RegisterCastKernels();
void RegisterFusedKernels();
void RegisterEmbeddingKernels();
void RegisterRopeKernels();
void RegisterAttentionKernels();  // KvCacheWrite, PagedAttention
void RegisterSamplingKernels();
void RegisterMoeKernels();  // MoeTopKRouting, MoeExperts, MoeExpertsFp8(PerToken, GroupScaled)
void RegisterGdnKernels();  // CausalConv1d, GatedDeltaRule

}  // namespace vt::cpu
