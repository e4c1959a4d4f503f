#include "model/layers/mlp.h"

#include "vt/error.h"
#include "vt/ops/activation.h"
#include "vt/ops/fused.h"
#include "vt/registry.h"

namespace vtllm::model {

GatedMlp GatedMlp::Load(const LinearContext& lc, const std::string& p, int64_t hidden, int64_t intermediate,
                        const TensorParallel& tp) {
  GatedMlp m;
  if (tp.size == 1) {
    m.intermediate_ = intermediate;
    m.gate_up_ = Linear::Load(lc, {{p + "gate_proj", intermediate}, {p + "up_proj", intermediate}}, hidden, false);
    m.down_ = Linear::Load(lc, {{p + "down_proj", hidden}}, intermediate, false);
    return m;
  }
  VT_CHECK(intermediate % tp.size == 0, "tensor parallelism: intermediate size ", intermediate,
           " cannot be split over ", tp.size, " ranks");
  const int64_t I = tp.Part(intermediate), i0 = tp.Offset(intermediate);
  m.intermediate_ = I;
  m.gate_up_ = Linear::Load(lc, {{p + "gate_proj", I, i0, intermediate}, {p + "up_proj", I, i0, intermediate}},
                            hidden, false);
  m.down_ = Linear::Load(lc, {{p + "down_proj", hidden, 0, 0, i0, intermediate}}, I, false);
  return m;
}

void GatedMlp::Forward(const vt::Queue& q, const LinearInput& x, const vt::Tensor& out, bool fuse_quant,
                       ActivationBuffers& buf) const {
  const int64_t T = x.rows(), I = intermediate_;
  const vt::DType act = out.dtype();
  const vt::Tensor gate_up = buf.Get(kSlotGateUp, T, 2 * I, act);
  if (down_.takes_quantized_input() && fuse_quant) {
    const vt::Tensor act8 = buf.Get(kSlotAct8, T, I, vt::DType::kF8E4M3);
    // One op where the gate/up linear has one (static FP8): the product, SiLU-mul and the
    // down input's quantization.
    if (act != vt::DType::kBF16 || !gate_up_.ApplySiluMulQuant(q, x.x, gate_up, act8, down_.input_scale())) {
      gate_up_.Apply(q, x, gate_up);
      vt::SiluMulQuantFp8(q, act8, gate_up, down_.input_scale());
    }
    down_.Apply(q, act8, out);
  } else if (const std::optional<Fp8GroupQuant> g = down_.input_group_quant();
             g && fuse_quant && act == vt::DType::kBF16 &&
             vt::OpRegistered(vt::OpId::kSiluMulQuantFp8PerTokenGroup, q.device().type)) {
    // Block / per-channel FP8 down: SiLU-mul and its per-token-group quantization in one op.
    gate_up_.Apply(q, x, gate_up);
    const vt::Tensor act8 = buf.Get(kSlotAct8, T, I, vt::DType::kF8E4M3);
    const vt::Tensor scales = buf.Get(kSlotAct8Scales, T, g->Groups(I), vt::DType::kF32);
    vt::SiluMulQuantFp8PerTokenGroup(q, act8, scales, gate_up, g->group_size, g->amax_floor, g->scale_floor);
    down_.Apply(q, LinearInput{act8, scales}, out);
  } else {
    gate_up_.Apply(q, x, gate_up);
    const vt::Tensor a = buf.Get(kSlotAct, T, I, act);
    vt::SiluMul(q, a, gate_up);
    down_.Apply(q, a, out);
  }
}

}  // namespace vtllm::model
