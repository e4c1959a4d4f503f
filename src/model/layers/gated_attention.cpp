#include "model/layers/gated_attention.h"

#include <cmath>

#include "model/checkpoint.h"
#include "model/layers/rotary.h"
#include "vt/error.h"
#include "vt/ops/activation.h"
#include "vt/ops/attention.h"
#include "vt/ops/cast.h"

namespace vtllm::model {

namespace {

// The head's dims in their loaded order, as runs of stored dims: (first stored dim, count).
// Rotary dims [0, R/2) and [R/2, R) go to [0, R/2) and [D/2, D/2 + R/2); the pass-through
// dims [R, D) fill [R/2, D/2) and [D/2 + R/2, D).
std::vector<std::pair<int64_t, int64_t>> HeadRuns(int64_t D, int64_t R) {
  std::vector<std::pair<int64_t, int64_t>> runs = {
      {0, R / 2}, {R, D / 2 - R / 2}, {R / 2, R / 2}, {R + D / 2 - R / 2, D / 2 - R / 2}};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& r : runs)
    if (r.second > 0) out.push_back(r);
  return out;
}

// The shards of `heads` heads of `name`, each head's rows at head * stride + base in a weight
// of `rows` rows, dims permuted by HeadRuns.
std::vector<LinearShard> PermutedHeads(const std::string& name, int64_t heads, int64_t stride, int64_t D, int64_t R,
                                       int64_t rows) {
  std::vector<LinearShard> shards;
  for (int64_t h = 0; h < heads; ++h)
    for (const auto& [first, count] : HeadRuns(D, R)) shards.push_back({name, count, h * stride + first, rows});
  return shards;
}

// 1 + w of a zero-centred norm weight [D], permuted like the heads, as F32 on the device.
vt::Tensor ZeroCentredNorm(const LinearContext& lc, const std::string& name, int64_t D, int64_t R) {
  const vt::Tensor w = LoadFloatWeight(*lc.checkpoint, name, {D}, vt::Device::Cpu());
  vt::Tensor wf = vt::Tensor::Empty({D}, vt::DType::kF32, vt::Device::Cpu());
  vt::Cast(*lc.host_queue, wf, w);
  std::vector<float> out;
  for (const auto& [first, count] : HeadRuns(D, R))
    for (int64_t i = 0; i < count; ++i) out.push_back(1.0f + wf.data_as<float>()[first + i]);
  return WeightOnDevice(vt::Tensor::FromHost(out.data(), {D}, vt::DType::kF32, vt::Device::Cpu()), lc.device);
}

}  // namespace

GatedAttention GatedAttention::Load(const LinearContext& lc, const std::string& p, const GatedAttentionShape& s) {
  const int64_t D = s.head_dim, R = s.rotary_dim, Hq = s.num_heads, Hk = s.num_kv_heads;
  VT_CHECK(D > 0 && D % 2 == 0 && R > 0 && R % 2 == 0 && R <= D && Hk > 0 && Hq % Hk == 0, p,
           ": attention shape (heads ", Hq, "/", Hk, ", head_dim ", D, ", rotary dims ", R, ") is not usable");
  GatedAttention a;
  a.s_ = s;
  a.scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t per_head = s.output_gate ? 2 * D : D;
  // vLLM merges q_proj (with its gate rows), k_proj and v_proj into one qkv_proj; loaded here
  // as linears of their own, they share that merge's FP8 scales (LinearShard::merged_with).
  auto qkv = [&](std::vector<LinearShard> shards) {
    for (LinearShard& sh : shards) sh.merged_with = {p + "q_proj", p + "k_proj", p + "v_proj"};
    return shards;
  };
  a.q_ = Linear::Load(lc, qkv(PermutedHeads(p + "q_proj", Hq, per_head, D, R, Hq * per_head)), s.hidden, false);
  if (s.output_gate) {
    std::vector<LinearShard> gate;
    for (int64_t h = 0; h < Hq; ++h) gate.push_back({p + "q_proj", D, h * per_head + D, Hq * per_head});
    a.gate_ = Linear::Load(lc, qkv(gate), s.hidden, false);
  }
  a.k_ = Linear::Load(lc, qkv(PermutedHeads(p + "k_proj", Hk, D, D, R, Hk * D)), s.hidden, false);
  a.v_ = Linear::Load(lc, qkv({{p + "v_proj", Hk * D}}), s.hidden, false);
  a.o_proj_ = Linear::Load(lc, {{p + "o_proj", s.hidden}}, Hq * D, false);
  a.q_norm_ = ZeroCentredNorm(lc, p + "q_norm.weight", D, R);
  a.k_norm_ = ZeroCentredNorm(lc, p + "k_norm.weight", D, R);
  if (s.fp8_kv_cache) a.kv_scales_ = LoadKvCacheScales(*lc.checkpoint, p);
  return a;
}

vt::Tensor GatedAttention::BuildRopeCache(const GatedAttentionShape& s, double theta, int64_t max_positions,
                                          vt::Device device) {
  VT_CHECK(max_positions > 0, "rope: max_position_embeddings must be > 0, got ", max_positions);
  RopeParams rp;
  rp.head_dim = s.rotary_dim;
  rp.theta = theta;
  const std::vector<float> inv = RopeInverseFrequencies(rp);  // R/2 frequencies over R dims
  const int64_t D = s.head_dim, half = D / 2;
  std::vector<float> cache(static_cast<size_t>(max_positions * D));
  for (int64_t pos = 0; pos < max_positions; ++pos) {
    float* row = &cache[static_cast<size_t>(pos * D)];
    for (int64_t i = 0; i < half; ++i) {
      if (i < static_cast<int64_t>(inv.size())) {
        const double angle = static_cast<double>(static_cast<float>(pos) * inv[static_cast<size_t>(i)]);
        row[i] = static_cast<float>(std::cos(angle));
        row[half + i] = static_cast<float>(std::sin(angle));
      } else {
        row[i] = 1.0f;
        row[half + i] = 0.0f;
      }
    }
  }
  return vt::Tensor::FromHost(cache.data(), {max_positions, D}, vt::DType::kF32, device);
}

int64_t GatedAttention::weight_bytes() const {
  int64_t b = q_.weight_bytes() + k_.weight_bytes() + v_.weight_bytes() + o_proj_.weight_bytes();
  if (s_.output_gate) b += gate_.weight_bytes();
  return b + static_cast<int64_t>(q_norm_.nbytes() + k_norm_.nbytes());
}

SharedInputQuant GatedAttention::input_quant() const {
  const Linear* in[] = {&q_, &k_, &v_, &gate_};
  return SharedInputQuantOf(std::span<const Linear* const>(in, s_.output_gate ? 4 : 3));
}

void GatedAttention::Forward(const vt::Queue& q, const vt::Tensor& x, const AttentionMetadata& m,
                             const vt::Tensor& key_cache, const vt::Tensor& value_cache, const vt::Tensor& rope_cache,
                             const vt::Tensor& out, ActivationBuffers& buf, const LinearInput* x_quantized) const {
  const int64_t T = x.dim(0), Hq = s_.num_heads, Hk = s_.num_kv_heads, D = s_.head_dim;
  const vt::DType act = out.dtype();
  const vt::Tensor qr = buf.Get(kSlotQ, T, Hq * D, act), kr = buf.Get(kSlotK, T, Hk * D, act);
  const vt::Tensor vr = buf.Get(kSlotV, T, Hk * D, act);
  // q, k, v and the gate are linears over one input: quantized once when they agree, and the
  // gate's product taken now, while that quantization is in the buffers.
  const LinearInput in = x_quantized != nullptr ? *x_quantized : QuantizeShared(q, x, input_quant(), buf);
  q_.Apply(q, in, qr);
  k_.Apply(q, in, kr);
  v_.Apply(q, in, vr);
  const vt::Tensor gate = s_.output_gate ? buf.Get(kSlotAttnGate, T, Hq * D, act) : vt::Tensor();
  if (s_.output_gate) gate_.Apply(q, in, gate);
  const vt::Tensor qn = buf.Get(kSlotQn, T, Hq * D, act);
  vt::QkNormRopeCacheWrite(q, qn, qr, kr, vr, &q_norm_, &k_norm_, s_.rms_eps, m.positions, rope_cache, key_cache,
                           value_cache, m.slot_mapping, kv_scales_.k, kv_scales_.v);
  const vt::Tensor attn = buf.Get(kSlotAttn, T, Hq * D, act);
  vt::PagedAttention(q, attn, qn, key_cache, value_cache, m.block_tables, m.seq_lens, m.query_start_loc, scale_,
                     kv_scales_.k, kv_scales_.v);
  if (!s_.output_gate) {
    o_proj_.Apply(q, attn, out);
    return;
  }
  const vt::Tensor gated = buf.Get(kSlotAttnGated, T, Hq * D, act);
  vt::SigmoidGatedAdd(q, gated, attn, gate);
  o_proj_.Apply(q, gated, out);
}

}  // namespace vtllm::model
