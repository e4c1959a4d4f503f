#include "model/layers/attention.h"

#include <cmath>

#include "model/checkpoint.h"
#include "model/load_error.h"
#include "vt/error.h"
#include "vt/ops/attention.h"
#include "vt/registry.h"

namespace vtllm::model {

KvCacheScales LoadKvCacheScales(const Checkpoint& ckpt, const std::string& prefix) {
  auto one = [&](const char* name, const char* proj) {
    const std::string spellings[] = {prefix + name, prefix + proj + "." + name, prefix + proj + ".output_scale"};
    const std::string* found = nullptr;
    for (const std::string& s : spellings) {
      if (!ckpt.Has(s)) continue;
      if (found != nullptr)
        ThrowLoadError(ckpt.FileOf(s), ": tensors '", *found, "' and '", s,
                       "' both give the KV cache's ", name, "; keep one");
      found = &s;
    }
    return found == nullptr ? 1.0f : ckpt.GetScaleF32(*found);
  };
  return {one("k_scale", "k_proj"), one("v_scale", "v_proj")};
}

AttentionHeads ShardHeads(int64_t Hq, int64_t Hk, const TensorParallel& tp) {
  const int64_t N = tp.size;
  VT_CHECK(N >= 1 && tp.rank >= 0 && tp.rank < N, "tensor parallelism: rank ", tp.rank, " of ", N);
  VT_CHECK(Hq % N == 0 && (Hk % N == 0 || N % Hk == 0), "tensor parallelism: ", Hq, " attention heads and ", Hk,
           " KV heads cannot be split over ", N, " ranks");
  AttentionHeads h;
  h.num_q = Hq / N;
  h.q_first = h.num_q * tp.rank;
  if (Hk % N == 0) {
    h.num_kv = Hk / N;
    h.kv_first = h.num_kv * tp.rank;
  } else {
    h.num_kv = 1;
    h.kv_first = tp.rank / (N / Hk);
  }
  return h;
}

Attention Attention::Load(const LinearContext& lc, const std::string& p, const AttentionShape& whole,
                          const TensorParallel& tp) {
  Attention a;
  AttentionShape s = whole;
  const AttentionHeads h = ShardHeads(whole.num_heads, whole.num_kv_heads, tp);
  s.num_heads = h.num_q;
  s.num_kv_heads = h.num_kv;
  a.s_ = s;
  if (s.fp8_kv_cache) a.kv_scales_ = LoadKvCacheScales(*lc.checkpoint, p);
  a.scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  const int64_t D = s.head_dim;
  if (s.qk_norm) {
    a.q_norm_ = LoadFloatWeight(*lc.checkpoint, p + "q_norm.weight", {D}, lc.device);
    a.k_norm_ = LoadFloatWeight(*lc.checkpoint, p + "k_norm.weight", {D}, lc.device);
  }
  if (tp.size == 1) {
    a.qkv_ = Linear::Load(
        lc, {{p + "q_proj", s.num_heads * D}, {p + "k_proj", s.num_kv_heads * D}, {p + "v_proj", s.num_kv_heads * D}},
        s.hidden, s.qkv_bias);
    a.o_proj_ = Linear::Load(lc, {{p + "o_proj", s.hidden}}, s.num_heads * D, false);
    return a;
  }
  // Column-parallel q/k/v (this rank's heads' rows), row-parallel o_proj (their columns).
  const int64_t Hq = whole.num_heads, Hk = whole.num_kv_heads;
  a.qkv_ = Linear::Load(lc,
                        {{p + "q_proj", h.num_q * D, h.q_first * D, Hq * D},
                         {p + "k_proj", h.num_kv * D, h.kv_first * D, Hk * D},
                         {p + "v_proj", h.num_kv * D, h.kv_first * D, Hk * D}},
                        s.hidden, s.qkv_bias);
  a.o_proj_ = Linear::Load(lc, {{p + "o_proj", s.hidden, 0, 0, h.q_first * D, Hq * D}}, h.num_q * D, false);
  return a;
}

int64_t Attention::weight_bytes() const {
  int64_t b = qkv_.weight_bytes() + o_proj_.weight_bytes();
  if (q_norm_.defined()) b += static_cast<int64_t>(q_norm_.nbytes() + k_norm_.nbytes());
  return b;
}

void Attention::Forward(const vt::Queue& q, const LinearInput& x, const AttentionMetadata& m,
                        const vt::Tensor& key_cache, const vt::Tensor& value_cache, const vt::Tensor& rope_cache,
                        const vt::Tensor& out, ActivationBuffers& buf, bool fuse_quant) const {
  const int64_t T = x.rows(), Hq = s_.num_heads, Hk = s_.num_kv_heads, D = s_.head_dim;
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
  // q/k norms (Qwen3), RoPE and the cache write in one op; without norms the query rotates
  // in place.
  const vt::Tensor qn = s_.qk_norm ? buf.Get(kSlotQn, T, Hq * D, act) : qr;
  vt::QkNormRopeCacheWrite(q, qn, qr, kr, vr, s_.qk_norm ? &q_norm_ : nullptr, s_.qk_norm ? &k_norm_ : nullptr,
                           s_.rms_eps, m.positions, rope_cache, key_cache, value_cache, m.slot_mapping, kv_scales_.k,
                           kv_scales_.v);
  qr = qn;
  const vt::Tensor attn = buf.Get(kSlotAttn, T, Hq * D, act);
  if (fuse_quant && act == vt::DType::kBF16 && o_proj_.takes_quantized_input() &&
      vt::OpRegistered(vt::OpId::kPagedAttentionQuantFp8, q.device().type)) {
    const vt::Tensor attn8 = buf.Get(kSlotAttn8, T, Hq * D, vt::DType::kF8E4M3);
    vt::PagedAttentionQuantFp8(q, attn, attn8, qr, key_cache, value_cache, m.block_tables, m.seq_lens,
                               m.query_start_loc, scale_, o_proj_.input_scale(), kv_scales_.k, kv_scales_.v);
    o_proj_.Apply(q, attn8, out);
    return;
  }
  vt::PagedAttention(q, attn, qr, key_cache, value_cache, m.block_tables, m.seq_lens, m.query_start_loc, scale_,
                     kv_scales_.k, kv_scales_.v);
  o_proj_.Apply(q, attn, out);
}

}  // namespace vtllm::model
