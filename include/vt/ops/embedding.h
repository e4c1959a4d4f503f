// Token embedding lookup.
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// out[t, :] = table[ids[t], :], converted to out's dtype (RNE; exact when the dtypes match).
// table: [V, H] F32/BF16/F16; ids: [T] I32; out: [T, H] F32/BF16/F16; all contiguous.
// An id outside [0, V) is a vt::Error naming the position and the id (the kernel checks,
// since ids may live in device memory).
void Embedding(const Queue& q, const Tensor& out, const Tensor& table, const Tensor& ids);

template <>
struct OpTraits<OpId::kEmbedding> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& table, const Tensor& ids);
};

}  // namespace vt
