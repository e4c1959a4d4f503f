#include "model/layers/attention.h"

#include <cmath>

#include "model/checkpoint.h"
#include "vt/error.h"
#include "vt/ops/attention.h"
#include "vt/ops/norm.h"
#include "vt/ops/rope.h"

namespace vtllm::model {

Attention Attention::Load(const LinearContext& lc, const std::string& p, const AttentionShape& s) {
  Attention a;
  a.s_ = s;
  a.scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  const int64_t D = s.head_dim;
  if (s.qk_norm) {
    a.q_norm_ = LoadFloatWeight(*lc.checkpoint, p + "q_norm.weight", {D}, lc.device);
    a.k_norm_ = LoadFloatWeight(*lc.checkpoint, p + "k_norm.weight", {D}, lc.device);
  }
  a.qkv_ = Linear::Load(
      lc, {{p + "q_proj", s.num_heads * D}, {p + "k_proj", s.num_kv_heads * D}, {p + "v_proj", s.num_kv_heads * D}},
      s.hidden, s.qkv_bias);
  a.o_proj_ = Linear::Load(lc, {{p + "o_proj", s.hidden}}, s.num_heads * D, false);
  return a;
}

int64_t Attention::weight_bytes() const {
  int64_t b = qkv_.weight_bytes() + o_proj_.weight_bytes();
  if (q_norm_.defined()) b += static_cast<int64_t>(q_norm_.nbytes() + k_norm_.nbytes());
  return b;
}

void Attention::Forward(const vt::Queue& q, const vt::Tensor& x, const AttentionMetadata& m,
                        const vt::Tensor& key_cache, const vt::Tensor& value_cache, const vt::Tensor& rope_cache,
                        const vt::Tensor& out, ActivationBuffers& buf) const {
  const int64_t T = x.dim(0), Hq = s_.num_heads, Hk = s_.num_kv_heads, D = s_.head_dim;
  const vt::DType act = out.dtype();
  vt::Tensor qr, kr, vr;
  if (T == 1) {
    // One row: the shards' columns of a single output are contiguous views, so q/k/v take
    // one GEMV instead of three.
    vt::Tensor qkv = buf.Get(kSlotQkv, 1, (Hq + 2 * Hk) * D, act);
    qkv_.Apply(q, x, qkv);
    qr = qkv.Slice(1, 0, Hq * D);
    kr = qkv.Slice(1, Hq * D, (Hq + Hk) * D);
    vr = qkv.Slice(1, (Hq + Hk) * D, (Hq + 2 * Hk) * D);
  } else {
    qr = buf.Get(kSlotQ, T, Hq * D, act);
    kr = buf.Get(kSlotK, T, Hk * D, act);
    vr = buf.Get(kSlotV, T, Hk * D, act);
    const vt::Tensor outs[3] = {qr, kr, vr};
    qkv_.ApplyShards(q, x, outs);
  }
  if (s_.qk_norm) {
    const vt::Tensor qn = buf.Get(kSlotQn, T, Hq * D, act), kn = buf.Get(kSlotKn, T, Hk * D, act);
    vt::RmsNorm(q, qn.View({T * Hq, D}), qr.View({T * Hq, D}), q_norm_, s_.rms_eps);
    vt::RmsNorm(q, kn.View({T * Hk, D}), kr.View({T * Hk, D}), k_norm_, s_.rms_eps);
    qr = qn;
    kr = kn;
  }
  vt::RotaryEmbedding(q, m.positions, qr, &kr, rope_cache, D);
  vt::KvCacheWrite(q, kr, vr, key_cache, value_cache, m.slot_mapping);
  const vt::Tensor attn = buf.Get(kSlotAttn, T, Hq * D, act);
  vt::PagedAttention(q, attn, qr, key_cache, value_cache, m.block_tables, m.seq_lens, m.query_start_loc, scale_);
  o_proj_.Apply(q, attn, out);
}

}  // namespace vtllm::model
