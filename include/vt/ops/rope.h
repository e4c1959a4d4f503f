// Rotary position embedding, neox style (HF's rotate_half; vLLM's is_neox_style=true).
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// Rotates query and key in place. For each token t, head h and i < D/2, with
// p = positions[t], c = cos_sin_cache[p, i], s = cos_sin_cache[p, D/2 + i]:
//   x1 = x[t, h*D + i], x2 = x[t, h*D + D/2 + i]
//   x[t, h*D + i]       = round(x1*c - x2*s)
//   x[t, h*D + D/2 + i] = round(x2*c + x1*s)
// computed in f32 and rounded once to the tensor's dtype.
// query: [T, Hq*D], key: [T, Hk*D] (same dtype, F32/BF16/F16, contiguous); key may be null.
// positions: [T] I32 or I64; cos_sin_cache: [max_pos, D] F32 ([cos | sin], built by the
// model layer with the model's rope theta and scaling). head_size = D, even.
// A position outside [0, max_pos) is a vt::Error naming it (checked by the kernel).
void RotaryEmbedding(const Queue& q, const Tensor& positions, const Tensor& query, const Tensor* key,
                     const Tensor& cos_sin_cache, int64_t head_size);

template <>
struct OpTraits<OpId::kRotaryEmbedding> {
  using Fn = void(const Queue& q, const Tensor& positions, const Tensor& query, const Tensor* key,
                  const Tensor& cos_sin_cache, int64_t head_size);
};

}  // namespace vt
