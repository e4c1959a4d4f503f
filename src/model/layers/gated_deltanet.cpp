#include "model/layers/gated_deltanet.h"

#include "model/checkpoint.h"
#include "vt/error.h"
#include "vt/ops/gdn.h"
#include "vt/ops/fused.h"
#include "vt/ops/norm.h"
#include "vt/registry.h"

namespace vtllm::model {

GatedDeltaNet GatedDeltaNet::Load(const LinearContext& lc, const std::string& p, const GdnShape& s) {
  VT_CHECK(s.num_key_heads > 0 && s.num_value_heads % s.num_key_heads == 0 && s.key_head_dim > 0 &&
               s.value_head_dim > 0 && s.conv_kernel >= 2,
           p, ": Gated DeltaNet shape (key heads ", s.num_key_heads, ", value heads ", s.num_value_heads, ", dk ",
           s.key_head_dim, ", dv ", s.value_head_dim, ", conv kernel ", s.conv_kernel, ") is not usable");
  GatedDeltaNet g;
  g.s_ = s;
  const int64_t nk = s.num_key_heads, nv = s.num_value_heads, dk = s.key_head_dim, dv = s.value_head_dim;
  const int64_t r = nv / nk, H = s.hidden, Ck = nk * dk, Cv = nv * dv;
  if (s.fused_projections) {
    // Per key-head group g: [q_g | k_g | v_g | z_g] in in_proj_qkvz, [b_g | a_g] in in_proj_ba.
    const std::string qkvz = p + "in_proj_qkvz", ba = p + "in_proj_ba";
    const int64_t W = 2 * dk + 2 * r * dv, rows = nk * W;
    std::vector<LinearShard> q, k, v, z, b, a;
    for (int64_t h = 0; h < nk; ++h) {
      q.push_back({qkvz, dk, h * W, rows});
      k.push_back({qkvz, dk, h * W + dk, rows});
      v.push_back({qkvz, r * dv, h * W + 2 * dk, rows});
      z.push_back({qkvz, r * dv, h * W + 2 * dk + r * dv, rows});
      b.push_back({ba, r, h * 2 * r, nk * 2 * r});
      a.push_back({ba, r, h * 2 * r + r, nk * 2 * r});
    }
    g.q_ = Linear::Load(lc, q, H, false);
    g.k_ = Linear::Load(lc, k, H, false);
    g.v_ = Linear::Load(lc, v, H, false);
    g.z_ = Linear::Load(lc, z, H, false);
    g.b_ = Linear::Load(lc, b, H, false);
    g.a_ = Linear::Load(lc, a, H, false);
  } else {
    // vLLM's merges: in_proj_qkv + in_proj_z -> in_proj_qkvz, in_proj_b + in_proj_a ->
    // in_proj_ba; for static FP8 each merge has one input scale (the max of its shards') and
    // its weights requantized to the largest weight scale.
    const std::string qkv = p + "in_proj_qkv";
    const int64_t rows = 2 * Ck + Cv;
    g.qkvz_ = Linear::Load(lc, {{qkv, Ck, 0, rows}, {qkv, Ck, Ck, rows}, {qkv, Cv, 2 * Ck, rows}, {p + "in_proj_z", Cv}},
                           H, false);
    g.ba_ = Linear::Load(lc, {{p + "in_proj_b", nv}, {p + "in_proj_a", nv}}, H, false);
  }
  g.out_proj_ = Linear::Load(lc, {{p + "out_proj", H}}, Cv, false);
  const int64_t C = 2 * Ck + Cv, K = s.conv_kernel;
  g.conv_weight_ = LoadFloatWeight(*lc.checkpoint, p + "conv1d.weight", {C, 1, K}, lc.device);
  const vt::Tensor w = g.conv_weight_.View({C, K});
  g.conv_q_ = w.Slice(0, 0, Ck);
  g.conv_k_ = w.Slice(0, Ck, 2 * Ck);
  g.conv_v_ = w.Slice(0, 2 * Ck, C);
  g.A_log_ = LoadFloatWeight(*lc.checkpoint, p + "A_log", {nv}, lc.device);
  g.dt_bias_ = LoadFloatWeight(*lc.checkpoint, p + "dt_bias", {nv}, lc.device);
  g.norm_ = LoadFloatWeight(*lc.checkpoint, p + "norm.weight", {dv}, lc.device);
  return g;
}

int64_t GatedDeltaNet::weight_bytes() const {
  int64_t b = out_proj_.weight_bytes();
  if (s_.fused_projections)
    b += q_.weight_bytes() + k_.weight_bytes() + v_.weight_bytes() + z_.weight_bytes() + b_.weight_bytes() +
         a_.weight_bytes();
  else
    b += qkvz_.weight_bytes() + ba_.weight_bytes();
  return b + static_cast<int64_t>(conv_weight_.nbytes() + A_log_.nbytes() + dt_bias_.nbytes() + norm_.nbytes());
}

SharedInputQuant GatedDeltaNet::input_quant() const {
  if (!s_.fused_projections) {
    const Linear* merged[] = {&qkvz_};
    return SharedInputQuantOf(merged);
  }
  const Linear* in[] = {&q_, &k_, &v_, &z_};
  return SharedInputQuantOf(in);
}

void GatedDeltaNet::Forward(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& query_start,
                            const vt::Tensor& state_slots, const LayerState& st, const vt::Tensor& out,
                            ActivationBuffers& buf, bool fuse_quant, const LinearInput* x_quantized) const {
  const int64_t T = x.dim(0), nk = s_.num_key_heads, nv = s_.num_value_heads;
  const int64_t dk = s_.key_head_dim, dv = s_.value_head_dim, Ck = nk * dk, Cv = nv * dv;
  const vt::DType act = out.dtype();
  const vt::Tensor qp = buf.Get(kSlotGdnQ, T, Ck, act), kp = buf.Get(kSlotGdnK, T, Ck, act);
  const vt::Tensor vp = buf.Get(kSlotGdnV, T, Cv, act), zp = buf.Get(kSlotGdnZ, T, Cv, act);
  const vt::Tensor bp = buf.Get(kSlotGdnB, T, nv, act), ap = buf.Get(kSlotGdnA, T, nv, act);
  if (s_.fused_projections) {
    // q, k, v and z are four linears over one input: quantized once when they agree.
    const LinearInput in = x_quantized != nullptr ? *x_quantized : QuantizeShared(q, x, input_quant(), buf);
    q_.Apply(q, in, qp);
    k_.Apply(q, in, kp);
    v_.Apply(q, in, vp);
    z_.Apply(q, in, zp);
    b_.Apply(q, x, bp);
    a_.Apply(q, x, ap);
  } else {
    const vt::Tensor qkvz[] = {qp, kp, vp, zp}, ba[] = {bp, ap};
    qkvz_.ApplyShards(q, x_quantized != nullptr ? *x_quantized : LinearInput(x), qkvz);
    ba_.ApplyShards(q, x, ba);
  }
  // The depthwise conv is per channel, so q, k and v run as three convs with their states.
  const vt::Tensor cq = buf.Get(kSlotGdnConvQ, T, Ck, act), ck = buf.Get(kSlotGdnConvK, T, Ck, act);
  const vt::Tensor cv = buf.Get(kSlotGdnConvV, T, Cv, act);
  vt::CausalConv1d(q, cq, qp, conv_q_, st.conv_q, query_start, state_slots);
  vt::CausalConv1d(q, ck, kp, conv_k_, st.conv_k, query_start, state_slots);
  vt::CausalConv1d(q, cv, vp, conv_v_, st.conv_v, query_start, state_slots);
  const vt::Tensor core = buf.Get(kSlotGdnCore, T, Cv, act);
  // chunk_size 0: the token-by-token recurrence (the CPU kernel's cheaper form; the same math
  // as HF's chunked prefill up to f32 rounding).
  vt::GatedDeltaRule(q, core.View({T, nv, dv}), cq.View({T, nk, dk}), ck.View({T, nk, dk}), cv.View({T, nv, dv}), ap,
                     bp, A_log_, dt_bias_, st.ssm, query_start, state_slots, 0);
  // The norm runs per value head (rows of dv); out_proj's groups are over the token's Cv
  // columns, so a group of whole heads' columns is a group of those rows, and the scales of a
  // token's heads lie side by side as out_proj reads them.
  const std::optional<Fp8GroupQuant> g = out_proj_.input_group_quant();
  if (g && fuse_quant && act == vt::DType::kBF16 && dv % g->group_size == 0 &&
      vt::OpRegistered(vt::OpId::kRmsNormGatedQuantFp8PerTokenGroup, q.device().type)) {
    const int64_t per_head = dv / g->group_size;
    const vt::Tensor x8 = buf.Get(kSlotGdnX8, T, Cv, vt::DType::kF8E4M3);
    const vt::Tensor xs = buf.Get(kSlotGdnX8Scales, T, nv * per_head, vt::DType::kF32);
    vt::RmsNormGatedQuantFp8PerTokenGroup(q, x8.View({T * nv, dv}), xs.View({T * nv, per_head}),
                                          core.View({T * nv, dv}), zp.View({T * nv, dv}), norm_, s_.rms_eps,
                                          g->group_size, g->amax_floor, g->scale_floor);
    out_proj_.Apply(q, LinearInput{x8, xs}, out);
    return;
  }
  // Static FP8 out_proj (one input scale): the gated norm and that quantization as one op.
  if (fuse_quant && act == vt::DType::kBF16 && out_proj_.takes_quantized_input()) {
    const vt::Tensor x8 = buf.Get(kSlotGdnX8, T, Cv, vt::DType::kF8E4M3);
    vt::RmsNormGatedQuantFp8(q, x8.View({T * nv, dv}), core.View({T * nv, dv}), zp.View({T * nv, dv}), norm_,
                             s_.rms_eps, out_proj_.input_scale());
    out_proj_.Apply(q, x8, out);
    return;
  }
  const vt::Tensor normed = buf.Get(kSlotGdnNormed, T, Cv, act);
  vt::RmsNormGated(q, normed.View({T * nv, dv}), core.View({T * nv, dv}), zp.View({T * nv, dv}), norm_, s_.rms_eps);
  out_proj_.Apply(q, normed, out);
}

}  // namespace vtllm::model
