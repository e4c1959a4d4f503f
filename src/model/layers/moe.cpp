#include "model/layers/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/checkpoint.h"
#include "model/load_error.h"
#include "model/quant_config.h"
#include "vt/error.h"
#include "vt/ops/activation.h"
#include "vt/ops/matmul.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"
#include "vt/prepared.h"

namespace vtllm::model {

namespace {

// Copies same-dtype [rows_i, K] parts one after another into one CPU tensor [Σ rows_i, K].
vt::Tensor Stack(const std::vector<vt::Tensor>& parts, int64_t K) {
  int64_t rows = 0;
  for (const vt::Tensor& p : parts) rows += p.dim(0);
  vt::Tensor out = vt::Tensor::Empty({rows, K}, parts[0].dtype(), vt::Device::Cpu());
  char* dst = static_cast<char*>(out.data());
  for (const vt::Tensor& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

}  // namespace

// The stacked expert weights on the host while a block loads, with their FP8 weight scales
// once quantized, and for online FP8 what each expert's two weights are made of.
struct MoeHostWeights {
  vt::Tensor gate_up, down;                       // [E * 2I, H], [E * H, I]
  std::vector<float> scale_gate_up, scale_down;   // FP8: [E] each
  std::vector<std::vector<OnlineFp8Part>> gate_up_parts, down_parts;  // [E][parts]
};

namespace {

std::string ExpertPrefix(const std::string& prefix, int64_t e, const char* proj) {
  std::string s = prefix;
  s += "experts.";
  s += std::to_string(e);
  s += ".";
  s += proj;
  return s;
}

// The experts' layout is told by the names the checkpoint holds: fused 3-D tensors
// `experts.gate_up_proj` [E, 2I, H] + `experts.down_proj` [E, H, I] (transformers 5 and the
// Qwen3.5-MoE releases), or one 2-D tensor per expert and projection. True for fused.
bool FusedExperts(const Checkpoint& ckpt, const std::string& p, int64_t E) {
  const std::string gu = p + "experts.gate_up_proj", dn = p + "experts.down_proj";
  const std::string first = ExpertPrefix(p, 0, "gate_proj") + ".weight";
  const bool fused = ckpt.Has(gu) || ckpt.Has(dn), per_expert = ckpt.Has(first);
  if (fused && per_expert)
    ThrowLoadError(ckpt.FileOf(first), ": the experts of '", p, "' are stored twice: fused ('",
                   ckpt.Has(gu) ? gu : dn, "') and per expert ('", first, "'); keep one layout");
  if (fused) {
    for (const std::string* n : {&gu, &dn})
      if (!ckpt.Has(*n))
        ThrowLoadError(ckpt.dir(), ": the fused experts of '", p, "' lack tensor '", *n, "' (expected ",
                       n == &gu ? "experts.gate_up_proj and experts.down_proj" : "both fused tensors", ")");
    return true;
  }
  if (!per_expert)
    ThrowLoadError(ckpt.dir(), ": no experts for '", p, "': expected '", gu, "' [", E,
                   ", 2 * moe_intermediate_size, hidden_size] and '", dn, "' (fused) or '", first,
                   "' and the other experts' {gate,up,down}_proj.weight (per expert)");
  return false;
}

// Reads a fused expert tensor after checking its shape against the config, so a malformed
// one is an error naming it, its shape and what each dimension should be.
vt::Tensor FusedExpertTensor(const Checkpoint& ckpt, const std::string& name, const vt::Shape& want,
                             const char* meaning) {
  const auto& info = ckpt.Info(name);
  if (info.shape != want)
    ThrowLoadError(ckpt.FileOf(name), ": tensor '", name, "' is ", vt::ShapeToString(info.shape), ", expected ",
                   vt::ShapeToString(want), " (", meaning, ")");
  if (info.dtype == vt::DType::kF8E4M3)
    ThrowLoadError(ckpt.FileOf(name), ": tensor '", name,
                   "' is FP8: FP8 experts are supported per expert (experts.E.{gate,up,down}_proj.weight with "
                   "their weight_scale / input_scale, or weight_scale_inv for block FP8) and, for block FP8 only, in the "
                   "fused layout with experts.gate_up_proj_scale_inv / experts.down_proj_scale_inv");
  const vt::DType dt = info.dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16;
  return ckpt.GetAs(name, dt, want);
}

// Fused experts: gate_up_proj [E, 2I, H] holds expert e's gate rows then its up rows (HF's
// chunk(2) of the output, vLLM's w1 then w3, no transpose) and down_proj [E, H, I] is stored
// as used, so both are already the stacked weights w_gate_up [E * 2I, H] and w_down [E * H, I].
// For online FP8, expert e's weights are its rows of each, named by the fused tensor and the
// element of it where they start.
void ReadFusedExperts(const Checkpoint& ckpt, const std::string& p, const MoeShape& s, MoeHostWeights& out) {
  const int64_t E = s.num_experts, H = s.hidden, I = s.intermediate;
  const std::string gu_name = p + "experts.gate_up_proj", dn_name = p + "experts.down_proj";
  const vt::Tensor gu = FusedExpertTensor(ckpt, gu_name, {E, 2 * I, H},
                                          "num_experts, 2 * moe_intermediate_size (gate rows, then up), hidden_size");
  const vt::Tensor dn = FusedExpertTensor(ckpt, dn_name, {E, H, I}, "num_experts, hidden_size, moe_intermediate_size");
  if (gu.dtype() != dn.dtype())
    ThrowLoadError(ckpt.FileOf(dn_name), ": the experts of '", p, "' are stored in different dtypes (",
                   vt::DTypeName(gu.dtype()), " gate_up_proj, ", vt::DTypeName(dn.dtype()), " down_proj)");
  out.gate_up = gu.View({E * 2 * I, H});
  out.down = dn.View({E * H, I});
  const std::string gu_file = ckpt.FileOf(gu_name) + ": tensor '" + gu_name + "'";
  const std::string dn_file = ckpt.FileOf(dn_name) + ": tensor '" + dn_name + "'";
  for (int64_t e = 0; e < E; ++e) {
    out.gate_up_parts.push_back({{out.gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I), gu_file, e * 2 * I * H}});
    out.down_parts.push_back({{out.down.Slice(0, e * H, (e + 1) * H), dn_file, e * H * I}});
  }
}

// Keeps tensor-parallel rank tp's block of each expert's intermediate dimension I of the
// stacked host weights: gate rows [i0, i0 + I/N) and up rows [I + i0, I + i0 + I/N) of each
// expert's 2I, and columns [i0, i0 + I/N) of every row of down. Bytes are copied as they are
// (FP8 ones already requantized to the whole expert's scales).
void SliceExperts(MoeHostWeights& x, int64_t E, int64_t H, int64_t I, const TensorParallel& tp) {
  const int64_t Ip = tp.Part(I), i0 = tp.Offset(I);
  const size_t es = vt::DTypeSize(x.gate_up.dtype());
  vt::Tensor gu = vt::Tensor::Empty({E * 2 * Ip, H}, x.gate_up.dtype(), vt::Device::Cpu());
  vt::Tensor dn = vt::Tensor::Empty({E * H, Ip}, x.down.dtype(), vt::Device::Cpu());
  const char* src = static_cast<const char*>(x.gate_up.data());
  char* dst = static_cast<char*>(gu.data());
  const size_t row = static_cast<size_t>(H) * es, block = static_cast<size_t>(Ip) * row;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t half = 0; half < 2; ++half) {  // the gate rows, then the up rows
      std::memcpy(dst, src + static_cast<size_t>(e * 2 * I + half * I + i0) * row, block);
      dst += block;
    }
  src = static_cast<const char*>(x.down.data());
  dst = static_cast<char*>(dn.data());
  const size_t cols = static_cast<size_t>(Ip) * es;
  for (int64_t r = 0; r < E * H; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * cols, src + static_cast<size_t>(r * I + i0) * es, cols);
  x.gate_up = gu;
  x.down = dn;
  x.gate_up_parts.clear();  // they name the unsplit rows (online FP8 only, which TP refuses)
  x.down_parts.clear();
}

// Online FP8 of the experts (vLLM's Fp8MoEMethod on an unquantized checkpoint): per expert,
// one scale over its merged gate/up rows and one over its down rows, each amax / 448, the
// bytes QuantFp8Static's (QuantizeFp8Online). Replaces the host weights with F8E4M3 ones.
void QuantizeExpertsOnline(const vt::Queue& host, MoeHostWeights& x) {
  vt::Tensor gu8 = vt::Tensor::Empty(x.gate_up.shape(), vt::DType::kF8E4M3, vt::Device::Cpu());
  vt::Tensor dn8 = vt::Tensor::Empty(x.down.shape(), vt::DType::kF8E4M3, vt::Device::Cpu());
  const int64_t E = static_cast<int64_t>(x.gate_up_parts.size());
  const int64_t r13 = x.gate_up.dim(0) / E, r2 = x.down.dim(0) / E;
  for (int64_t e = 0; e < E; ++e) {
    x.scale_gate_up.push_back(QuantizeFp8Online(host, x.gate_up_parts[e], gu8.Slice(0, e * r13, (e + 1) * r13)));
    x.scale_down.push_back(QuantizeFp8Online(host, x.down_parts[e], dn8.Slice(0, e * r2, (e + 1) * r2)));
  }
  x.gate_up = gu8;
  x.down = dn8;
  x.gate_up_parts.clear();
  x.down_parts.clear();
}

}  // namespace

SparseMoeBlock SparseMoeBlock::Load(const LinearContext& lc, const std::string& p, const MoeShape& shape,
                                    const TensorParallel& tp) {
  const Checkpoint& ckpt = *lc.checkpoint;
  SparseMoeBlock m;
  m.s_ = shape;
  const int64_t E = shape.num_experts, H = shape.hidden;
  int64_t I = shape.intermediate;
  const int N = tp.size;
  if (N > 1) {
    VT_CHECK(I % N == 0, "tensor parallelism: moe_intermediate_size ", I, " of '", p, "experts' cannot be split over ",
             N, " ranks");
    VT_CHECK(shape.shared_intermediate % N == 0, "tensor parallelism: shared_expert_intermediate_size ",
             shape.shared_intermediate, " of '", p, "shared_expert' cannot be split over ", N, " ranks");
    VT_CHECK(lc.quant->method != QuantMethod::kFp8Online, "tensor parallelism: the experts of '", p,
             "' cannot be split with online FP8 (--quantization fp8): its per-token activation scales span each "
             "expert's whole intermediate row");
  }
  const std::string router = p + "gate.weight";
  if (ckpt.Has(router) && ckpt.Info(router).dtype == vt::DType::kF8E4M3)
    ThrowLoadError(ckpt.FileOf(router), ": tensor '", router,
                   "' is FP8; the MoE router is kept unquantized (list it in exclude_modules / ignore)");
  m.router_ = LoadFloatWeight(ckpt, router, {E, H}, lc.device);
  if (shape.shared_intermediate > 0) {
    m.shared_ = GatedMlp::Load(lc, p + "shared_expert.", H, shape.shared_intermediate, tp);
    const std::string gate = p + "shared_expert_gate.weight";
    if (ckpt.Has(gate) && ckpt.Info(gate).dtype == vt::DType::kF8E4M3)
      ThrowLoadError(ckpt.FileOf(gate), ": tensor '", gate,
                     "' is FP8; the shared expert's gate is kept unquantized (list it in exclude_modules / ignore)");
    m.shared_gate_ = LoadFloatWeight(ckpt, gate, {1, H}, lc.device);
  }
  m.observer_ = lc.observer;
  m.fuse_quant_ = lc.fuse_quant;
  if (m.observer_ != nullptr) m.prefix_ = p;

  MoeHostWeights x;
  const std::string first = ExpertPrefix(p, 0, "gate_proj");
  const bool fused = FusedExperts(ckpt, p, E);
  const QuantMethod qm = lc.quant->method;
  if (!fused && (qm == QuantMethod::kFp8Block || qm == QuantMethod::kFp8ChannelToken) &&
      ckpt.Info(first + ".weight").dtype == vt::DType::kF8E4M3) {
    LoadGroupScaled(lc, p, tp, m);
    return m;
  }
  if (fused && qm == QuantMethod::kFp8Block && ckpt.Info(p + "experts.gate_up_proj").dtype == vt::DType::kF8E4M3) {
    LoadGroupScaledFused(lc, p, tp, m);
    return m;
  }
  if (fused) {
    ReadFusedExperts(ckpt, p, shape, x);
  } else {
    ReadPerExpert(lc, p, shape, m, x);
  }
  if (N > 1) {
    SliceExperts(x, E, H, I, tp);
    I = m.s_.intermediate = tp.Part(I);
  }
  if (lc.quant->method == QuantMethod::kFp8Online && lc.quant->IsQuantized(first)) {
    QuantizeExpertsOnline(*lc.host_queue, x);
    m.fp8_ = m.per_token_ = true;
  }
  m.w_gate_up_ = WeightOnDevice(x.gate_up, lc.device);
  m.w_down_ = WeightOnDevice(x.down, lc.device);
  if (!m.fp8_) return m;
  std::vector<float> a13(static_cast<size_t>(E)), a2(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {  // static: input_scale * weight_scale; per token: weight_scale
    a13[e] = m.per_token_ ? x.scale_gate_up[e] : m.gate_up_input_scale_ * x.scale_gate_up[e];
    a2[e] = m.per_token_ ? x.scale_down[e] : m.down_input_scale_ * x.scale_down[e];
  }
  m.alpha_gate_up_ = WeightOnDevice(vt::Tensor::FromHost(a13.data(), {E}, vt::DType::kF32), lc.device);
  m.alpha_down_ = WeightOnDevice(vt::Tensor::FromHost(a2.data(), {E}, vt::DType::kF32), lc.device);
  // The CPU's kernels may multiply a copy laid out for them, each expert's rows from its
  // own block; the stacked bytes are then freed (vt allocated them in Stack or the
  // online quantization).
  if (lc.device.is_cpu()) {
    std::vector<int64_t> r13, r2;
    for (int64_t e = 0; e < E; ++e) {
      r13.push_back(e * 2 * I);
      r2.push_back(e * H);
    }
    m.w_gate_up_ = vt::PrepareWeight(*lc.host_queue, m.w_gate_up_, vt::WeightUse::kMatmulB, r13);
    m.w_down_ = vt::PrepareWeight(*lc.host_queue, m.w_down_, vt::WeightUse::kMatmulB, r2);
    for (vt::Tensor* w : {&m.w_gate_up_, &m.w_down_})
      if (w->backend_layout() != nullptr) w->ReleaseBytes();
  }
  return m;
}

// One tensor per expert and projection, BF16/F32 or static FP8 (whose scales are read and
// merged here, as vLLM merges them), stacked on the host.
void SparseMoeBlock::ReadPerExpert(const LinearContext& lc, const std::string& p, const MoeShape& shape,
                                   SparseMoeBlock& m, MoeHostWeights& x) {
  const Checkpoint& ckpt = *lc.checkpoint;
  const int64_t E = shape.num_experts, H = shape.hidden, I = shape.intermediate;
  // FP8 or not is what the checkpoint stores; the quantization config must agree.
  const std::string first = ExpertPrefix(p, 0, "gate_proj");
  m.fp8_ = ckpt.Info(first + ".weight").dtype == vt::DType::kF8E4M3;
  if (m.fp8_ && IsFp8(lc.quant->method) && lc.quant->method != QuantMethod::kFp8Static)
    ThrowLoadError(ckpt.FileOf(first + ".weight"), ": tensor '", first, ".weight' is an FP8 expert in the ",
                   lc.quant->format, " layout with dynamic activations; MoE experts are supported in static "
                   "per-tensor FP8 only, not yet in this layout");
  if (m.fp8_ && !(lc.quant->method == QuantMethod::kFp8Static && lc.quant->IsQuantized(first)))
    ThrowLoadError(ckpt.FileOf(first + ".weight"), ": tensor '", first,
                   ".weight' is FP8 but the quantization config does not quantize '", first, "'");
  std::vector<vt::Tensor> gate_up, down;
  std::vector<std::string> names;  // "FILE: tensor 'NAME'" of gate, up, down of each expert
  if (m.fp8_) m.gate_up_input_scale_ = m.down_input_scale_ = 0.0f;  // the max over the experts
  for (int64_t e = 0; e < E; ++e) {
    const std::string g = ExpertPrefix(p, e, "gate_proj"), u = ExpertPrefix(p, e, "up_proj"),
                      d = ExpertPrefix(p, e, "down_proj");
    for (const std::string* n : {&g, &u, &d}) {
      const bool is_fp8 = ckpt.Info(*n + ".weight").dtype == vt::DType::kF8E4M3;
      if (is_fp8 != m.fp8_)
        ThrowLoadError(ckpt.FileOf(*n + ".weight"), ": tensor '", *n, ".weight' is ",
                       is_fp8 ? "FP8" : "not FP8", " but '", first, ".weight' is ", m.fp8_ ? "FP8" : "not",
                       ": the experts of one layer must all be quantized or none");
      names.push_back(ckpt.FileOf(*n + ".weight") + ": tensor '" + *n + ".weight'");
    }
    if (!m.fp8_) {
      const vt::DType dt = ckpt.Info(g + ".weight").dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16;
      gate_up.push_back(ckpt.GetAs(g + ".weight", dt, {I, H}));
      gate_up.push_back(ckpt.GetAs(u + ".weight", dt, {I, H}));
      down.push_back(ckpt.GetAs(d + ".weight", dt, {H, I}));
      continue;
    }
    vt::Tensor wg = ckpt.GetAs(g + ".weight", vt::DType::kF8E4M3, {I, H});
    vt::Tensor wu = ckpt.GetAs(u + ".weight", vt::DType::kF8E4M3, {I, H});
    const float sg = ckpt.GetScaleF32(g + ".weight_scale"), su = ckpt.GetScaleF32(u + ".weight_scale");
    m.gate_up_input_scale_ = std::max({m.gate_up_input_scale_, ckpt.GetScaleF32(g + ".input_scale"),
                                       ckpt.GetScaleF32(u + ".input_scale")});
    // Merged gate/up: requantize the shard whose scale is not the larger one (vLLM).
    const float s = std::max(sg, su);
    for (auto [w, sw] : {std::pair{&wg, sg}, std::pair{&wu, su}}) {
      if (sw == s) continue;
      vt::Tensor re = vt::Tensor::Empty({I, H}, vt::DType::kF8E4M3, vt::Device::Cpu());
      RequantizeFp8(*lc.host_queue, re, *w, sw, s);
      *w = re;
    }
    gate_up.push_back(wg);
    gate_up.push_back(wu);
    x.scale_gate_up.push_back(s);
    down.push_back(ckpt.GetAs(d + ".weight", vt::DType::kF8E4M3, {H, I}));
    x.scale_down.push_back(ckpt.GetScaleF32(d + ".weight_scale"));
    m.down_input_scale_ = std::max(m.down_input_scale_, ckpt.GetScaleF32(d + ".input_scale"));
  }
  for (const vt::Tensor& t : gate_up)
    if (t.dtype() != gate_up[0].dtype() || down[0].dtype() != gate_up[0].dtype())
      ThrowLoadError(ckpt.dir(), ": the experts of '", p, "' are stored in different dtypes");
  x.gate_up = Stack(gate_up, H);
  x.down = Stack(down, I);
  if (m.fp8_) return;
  for (int64_t e = 0; e < E; ++e) {
    const size_t n = static_cast<size_t>(3 * e);
    x.gate_up_parts.push_back({{x.gate_up.Slice(0, e * 2 * I, e * 2 * I + I), names[n], 0},
                               {x.gate_up.Slice(0, e * 2 * I + I, (e + 1) * 2 * I), names[n + 1], 0}});
    x.down_parts.push_back({{x.down.Slice(0, e * H, (e + 1) * H), names[n + 2], 0}});
  }
}

int64_t SparseMoeBlock::weight_bytes() const {
  return active_weight_bytes() + (s_.num_experts - s_.top_k) * ExpertBytes();
}

int64_t SparseMoeBlock::active_weight_bytes() const {
  int64_t b = static_cast<int64_t>(router_.nbytes()) + s_.top_k * ExpertBytes();
  if (s_.shared_intermediate > 0) b += shared_.weight_bytes() + static_cast<int64_t>(shared_gate_.nbytes());
  return b;
}

namespace {

// Max |v| over a contiguous CPU F32/BF16 tensor; NaN when an element is not finite.
float AmaxOrNan(const vt::Tensor& t) {
  float m = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.dtype() == vt::DType::kF32 ? t.data_as<float>()[i] : vt::Bf16ToFloat(t.data_as<uint16_t>()[i]);
    finite = finite && std::isfinite(v);
    m = std::max(m, std::fabs(v));
  }
  return finite ? m : NAN;
}

}  // namespace

// Calibration: each expert's inputs, from its tokens' rows of x and, through the expert's own
// gate/up rows and SiluMul, their down inputs (the values MoeExperts computes, up to the order
// of the f32 sums).
void SparseMoeBlock::ObserveExpertInputs(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& ids) const {
  VT_CHECK(!fp8_ && q.device().is_cpu() && x.is_contiguous(), "MoE calibration runs unquantized experts on a CPU");
  q.Synchronize();
  const int64_t T = x.dim(0), H = s_.hidden, I = s_.intermediate, E = s_.num_experts, k = s_.top_k;
  const int32_t* id = ids.data_as<int32_t>();
  std::vector<int64_t> tokens(static_cast<size_t>(E), 0);
  std::vector<float> gate_up_amax(static_cast<size_t>(E), 0.0f), down_amax(static_cast<size_t>(E), 0.0f);
  const size_t row = static_cast<size_t>(H) * vt::DTypeSize(x.dtype());
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j)
        if (id[t * k + j] == e) rows.push_back(t);  // the top-k ids of a token are distinct
    const int64_t n = static_cast<int64_t>(rows.size());
    tokens[e] = n;
    if (n == 0) continue;
    const vt::Tensor xs = vt::Tensor::Empty({n, H}, x.dtype(), vt::Device::Cpu());
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(static_cast<char*>(xs.data()) + r * row, static_cast<const char*>(x.data()) + rows[r] * row, row);
    const vt::Tensor gu = vt::Tensor::Empty({n, 2 * I}, x.dtype(), vt::Device::Cpu());
    const vt::Tensor a = vt::Tensor::Empty({n, I}, x.dtype(), vt::Device::Cpu());
    vt::Matmul(q, gu, xs, w_gate_up_.Slice(0, e * 2 * I, (e + 1) * 2 * I));
    vt::SiluMul(q, a, gu);
    q.Synchronize();
    gate_up_amax[e] = AmaxOrNan(xs);
    down_amax[e] = AmaxOrNan(a);
  }
  observer_->ObserveExperts(prefix_, tokens, gate_up_amax, down_amax);
}

void SparseMoeBlock::Forward(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& out, ActivationBuffers& buf,
                             const vt::Tensor* given_x8, const vt::Tensor* given_x_scales) const {
  const int64_t T = x.dim(0), E = s_.num_experts, k = s_.top_k;
  const vt::Tensor logits = buf.Get(kSlotRouterLogits, T, E, vt::DType::kF32);
  const vt::Tensor ids = buf.Get(kSlotTopKIds, T, k, vt::DType::kI32);
  const vt::Tensor weights = buf.Get(kSlotTopKWeights, T, k, vt::DType::kF32);
  vt::Matmul(q, logits, x, router_);
  vt::MoeTopKRouting(q, ids, weights, logits, s_.norm_topk_prob);
  if (observer_ != nullptr) ObserveExpertInputs(q, x, ids);
  if (!fp8_) {
    vt::MoeExperts(q, out, x, ids, weights, w_gate_up_, w_down_);
  } else if (group_scaled_) {
    ForwardGroupScaled(q, x, out, ids, weights, buf, given_x8, given_x_scales);
  } else if (per_token_) {
    const vt::Tensor x8 = buf.Get(kSlotX8, T, s_.hidden, vt::DType::kF8E4M3);
    const vt::Tensor xs = buf.Get(kSlotX8Scales, T, 1, vt::DType::kF32);
    vt::QuantFp8PerTokenGroup(q, x8, xs, x, s_.hidden, 0.0f, vt::kFp8PerTokenScaleFloor);
    vt::MoeExpertsFp8PerToken(q, out, x8, xs, ids, weights, w_gate_up_, alpha_gate_up_, w_down_, alpha_down_);
  } else {
    const vt::Tensor x8 = given_x8 != nullptr ? *given_x8 : buf.Get(kSlotX8, T, s_.hidden, vt::DType::kF8E4M3);
    if (given_x8 == nullptr) vt::QuantFp8Static(q, x8, x, gate_up_input_scale_);
    vt::MoeExpertsFp8(q, out, x8, ids, weights, w_gate_up_, alpha_gate_up_, w_down_, down_input_scale_, alpha_down_);
  }
  if (s_.shared_intermediate == 0) return;
  // out += sigmoid(x · shared_gateᵀ) * shared_expert(x)
  const vt::Tensor shared = buf.Get(kSlotSharedExpert, T, s_.hidden, out.dtype());
  shared_.Forward(q, x, shared, fuse_quant_ && x.dtype() == vt::DType::kBF16, buf);
  const vt::Tensor gate = buf.Get(kSlotSharedGate, T, 1, vt::DType::kF32);
  vt::Matmul(q, gate, x, shared_gate_);
  vt::SigmoidGatedAdd(q, out, shared, gate, &out);
}

}  // namespace vtllm::model
