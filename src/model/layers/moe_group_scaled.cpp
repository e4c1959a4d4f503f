// SparseMoeBlock's block-FP8 and per-channel FP8 experts (moe.h): loading, with tensor
// parallelism, and the forward through MoeExpertsFp8GroupScaled.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/checkpoint.h"
#include "model/layers/moe.h"
#include "model/load_error.h"
#include "model/quant_config.h"
#include "vt/error.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"
#include "vt/prepared.h"

namespace vtllm::model {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string Proj(const std::string& prefix, int64_t e, const char* proj) {
  return prefix + "experts." + std::to_string(e) + "." + proj;
}

// Appends rows [r0, r1) of a [rows, cols] tensor of `es`-byte elements, columns [c0, c1), to out.
void AppendBlock(std::vector<char>& out, const void* src, int64_t cols, size_t es, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1) {
  const char* p = static_cast<const char*>(src);
  const size_t n = static_cast<size_t>(c1 - c0) * es;
  for (int64_t r = r0; r < r1; ++r) {
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p + (static_cast<size_t>(r * cols + c0)) * es, n);
  }
}

vt::Tensor HostTensor(const std::vector<char>& bytes, const vt::Shape& shape, vt::DType dt) {
  vt::Tensor t = vt::Tensor::Empty(shape, dt, vt::Device::Cpu());
  VT_CHECK(t.nbytes() == bytes.size(), "internal: MoE expert stacking made ", bytes.size(), " bytes for ",
           t.Describe());
  std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

// A fused expert tensor's block scales `scale` [E, rows, cols], F32 or BF16 as stored, widened
// to f32; each finite and > 0 (a LoadError naming the tensor otherwise).
std::vector<float> ReadFusedScales(const Checkpoint& ckpt, const std::string& weight, const std::string& scale,
                                   int64_t E, int64_t rows, int64_t cols) {
  if (!ckpt.Has(scale))
    ThrowLoadError(ckpt.dir(), ": tensor '", scale, "' is missing (the block scales of FP8 experts '", weight, "')");
  const vt::DType dt = ckpt.Info(scale).dtype == vt::DType::kBF16 ? vt::DType::kBF16 : vt::DType::kF32;
  const vt::Tensor sc = ckpt.GetAs(scale, dt, {E, rows, cols});
  std::vector<float> f(static_cast<size_t>(E * rows * cols));
  for (size_t i = 0; i < f.size(); ++i) {
    const float v = dt == vt::DType::kF32 ? sc.data_as<float>()[i] : vt::Bf16ToFloat(sc.data_as<uint16_t>()[i]);
    if (!(std::isfinite(v) && v > 0.0f))
      ThrowLoadError(ckpt.FileOf(scale), ": tensor '", scale, "' holds ", v, " at element ", i,
                     "; FP8 weight scales must be finite and > 0");
    f[i] = v;
  }
  return f;
}

// The CPU lays out the experts' stacked weight for the AVX2 rows' outer-product tiles (as the
// block linears' are; MoeExpertsFp8GroupScaled multiplies each expert's row slice of the
// copy) and releases the stored codes.
vt::Tensor LaidOutOnCpu(const LinearContext& lc, const vt::Tensor& w) {
  if (!lc.device.is_cpu()) return w;
  vt::Tensor t = vt::PrepareWeight(*lc.host_queue, w, vt::WeightUse::kMatmulGroupScaledB);
  if (t.backend_layout() != nullptr) t.ReleaseBytes();
  return t;
}

}  // namespace

void SparseMoeBlock::LoadGroupScaled(const LinearContext& lc, const std::string& p, const TensorParallel& tp,
                                     SparseMoeBlock& m) {
  const Checkpoint& ckpt = *lc.checkpoint;
  const QuantConfig& qc = *lc.quant;
  const bool block = qc.method == QuantMethod::kFp8Block;
  const int64_t E = m.s_.num_experts, H = m.s_.hidden, I = m.s_.intermediate;
  const std::string first = Proj(p, 0, "gate_proj");
  if (!qc.IsQuantized(first))
    ThrowLoadError(ckpt.FileOf(first + ".weight"), ": tensor '", first,
                   ".weight' is FP8 but the quantization config does not quantize '", first, "'");
  // The stored blocks (per channel: one row per block, one group per row).
  const int64_t bn = block ? qc.block_n : 1, bk_stored = block ? qc.block_k : 0;
  const int64_t Ip = tp.Part(I), i0 = tp.Offset(I);
  if (tp.size > 1) {
    if (!block)
      ThrowLoadError(ckpt.dir(), ": tensor parallelism: the per-channel FP8 experts of '", p,
                     "' cannot be split: the per-token scale of each expert's down input spans its whole "
                     "intermediate row (run with one rank)");
    if (Ip % bn != 0 || Ip % bk_stored != 0)
      ThrowLoadError(ckpt.dir(), ": tensor parallelism: moe_intermediate_size ", I, " of '", p, "experts' split over ",
                     tp.size, " ranks gives ", Ip, " rows per rank, not a multiple of weight_block_size [", bn, ", ",
                     bk_stored, "]; use fewer ranks");
  }
  const std::string scale_suffix = block ? ".weight_scale_inv" : ".weight_scale";
  // Full-expert scale grids as stored, and this rank's part of them.
  const int64_t nI = CeilDiv(I, bn), nH = CeilDiv(H, bn);
  const int64_t GHs = block ? CeilDiv(H, bk_stored) : 1, GIs = block ? CeilDiv(I, bk_stored) : 1;
  const int64_t nIp = CeilDiv(Ip, bn), j0 = i0 / bn;            // gate/up scale rows of this rank
  const int64_t GIp = block ? CeilDiv(Ip, bk_stored) : 1, g0 = block ? i0 / bk_stored : 0;  // down groups
  std::vector<char> w13, w2, s13, s2;
  w13.reserve(static_cast<size_t>(E * 2 * Ip * H));
  w2.reserve(static_cast<size_t>(E * H * Ip));
  for (int64_t e = 0; e < E; ++e) {
    const std::string g = Proj(p, e, "gate_proj"), u = Proj(p, e, "up_proj"), d = Proj(p, e, "down_proj");
    for (const std::string* n : {&g, &u, &d})
      if (ckpt.Info(*n + ".weight").dtype != vt::DType::kF8E4M3)
        ThrowLoadError(ckpt.FileOf(*n + ".weight"), ": tensor '", *n, ".weight' is not FP8 but '", first,
                       ".weight' is: the experts of one layer must all be quantized or none");
    for (const std::string* n : {&g, &u}) {
      const vt::Tensor w = ckpt.GetAs(*n + ".weight", vt::DType::kF8E4M3, {I, H});
      AppendBlock(w13, w.data(), H, 1, i0, i0 + Ip, 0, H);
    }
    for (const std::string* n : {&g, &u}) {  // the gate's scale rows, then the up's: each its own blocks
      const std::vector<float> sc = ReadWeightScales(ckpt, *n, *n + scale_suffix, nI, GHs);
      AppendBlock(s13, sc.data(), GHs, sizeof(float), j0, j0 + nIp, 0, GHs);
    }
    const vt::Tensor wd = ckpt.GetAs(d + ".weight", vt::DType::kF8E4M3, {H, I});
    AppendBlock(w2, wd.data(), I, 1, 0, H, i0, i0 + Ip);
    const std::vector<float> sd = ReadWeightScales(ckpt, d, d + scale_suffix, nH, GIs);
    AppendBlock(s2, sd.data(), GIs, sizeof(float), 0, nH, g0, g0 + GIp);
  }
  m.s_.intermediate = Ip;
  m.fp8_ = m.group_scaled_ = true;
  m.block_n_ = bn;
  // Per channel: one group per row of either projection (bk >= max(H, I)).
  m.block_k_ = block ? bk_stored : std::max(H, Ip);
  m.amax_floor_ = block ? vt::kFp8BlockAmaxFloor : 0.0f;
  m.scale_floor_ = block ? 0.0f : vt::kFp8PerTokenScaleFloor;
  m.w_gate_up_ = WeightOnDevice(HostTensor(w13, {E * 2 * Ip, H}, vt::DType::kF8E4M3), lc.device);
  m.w_down_ = WeightOnDevice(HostTensor(w2, {E * H, Ip}, vt::DType::kF8E4M3), lc.device);
  m.w_gate_up_ = LaidOutOnCpu(lc, m.w_gate_up_);
  m.w_down_ = LaidOutOnCpu(lc, m.w_down_);
  m.s_gate_up_ = WeightOnDevice(HostTensor(s13, {E * 2 * nIp, GHs}, vt::DType::kF32), lc.device);
  m.s_down_ = WeightOnDevice(HostTensor(s2, {E * nH, GIp}, vt::DType::kF32), lc.device);
}

// transformers 5's fused layout of block-FP8 experts (its fine-grained FP8 `FP8Expert`):
// `experts.gate_up_proj` [E, 2I, H] and `experts.down_proj` [E, H, I] F8E4M3 with
// `experts.gate_up_proj_scale_inv` [E, ceil(2I/bn), ceil(H/bk)] (blocks over the merged rows:
// gate row i reads block i / bn, up row i block (I + i) / bn) and `experts.down_proj_scale_inv`
// [E, ceil(H/bn), ceil(I/bk)]. When I (and this rank's part) is a whole number of blocks those
// are the op's separate gate and up scale rows; otherwise the blocks straddle gate and up, and
// the scales are laid out per row (block_n = 1, down's too), each row the copy of its block's.
void SparseMoeBlock::LoadGroupScaledFused(const LinearContext& lc, const std::string& p, const TensorParallel& tp,
                                          SparseMoeBlock& m) {
  const Checkpoint& ckpt = *lc.checkpoint;
  const QuantConfig& qc = *lc.quant;
  const int64_t E = m.s_.num_experts, H = m.s_.hidden, I = m.s_.intermediate;
  const int64_t bn = qc.block_n, bk = qc.block_k;
  const std::string gu_name = p + "experts.gate_up_proj", dn_name = p + "experts.down_proj";
  if (!qc.IsQuantized(p + "experts.0.gate_proj"))
    ThrowLoadError(ckpt.FileOf(gu_name), ": tensor '", gu_name,
                   "' is FP8 but the quantization config does not quantize the experts of '", p, "'");
  if (ckpt.Info(dn_name).dtype != vt::DType::kF8E4M3)
    ThrowLoadError(ckpt.FileOf(dn_name), ": tensor '", dn_name, "' is not FP8 but '", gu_name, "' is");
  const int64_t Ip = tp.Part(I), i0 = tp.Offset(I);
  if (tp.size > 1 && Ip % bk != 0)
    ThrowLoadError(ckpt.dir(), ": tensor parallelism: moe_intermediate_size ", I, " of '", p, "experts' split over ",
                   tp.size, " ranks gives ", Ip, " columns of down per rank, not a multiple of weight_block_size's ",
                   bk, "; use fewer ranks");
  const vt::Tensor gu = ckpt.GetAs(gu_name, vt::DType::kF8E4M3, {E, 2 * I, H});
  const vt::Tensor dn = ckpt.GetAs(dn_name, vt::DType::kF8E4M3, {E, H, I});
  const int64_t n2 = CeilDiv(2 * I, bn), nH = CeilDiv(H, bn), GH = CeilDiv(H, bk), GI = CeilDiv(I, bk);
  const std::vector<float> sgu = ReadFusedScales(ckpt, gu_name, gu_name + "_scale_inv", E, n2, GH);
  const std::vector<float> sdn = ReadFusedScales(ckpt, dn_name, dn_name + "_scale_inv", E, nH, GI);
  const bool blocks = I % bn == 0 && Ip % bn == 0;  // gate and up own whole blocks, and so does each rank's part
  const int64_t obn = blocks ? bn : 1, GIp = CeilDiv(Ip, bk), g0 = i0 / bk;
  std::vector<char> w13, w2, s13, s2;
  for (int64_t e = 0; e < E; ++e) {
    const char* ge = static_cast<const char*>(gu.data()) + e * 2 * I * H;
    AppendBlock(w13, ge, H, 1, i0, i0 + Ip, 0, H);          // gate rows of this rank
    AppendBlock(w13, ge, H, 1, I + i0, I + i0 + Ip, 0, H);  // up rows
    const float* se = sgu.data() + e * n2 * GH;
    for (int64_t half = 0; half < 2; ++half) {
      if (blocks) {
        AppendBlock(s13, se, GH, sizeof(float), (half * I + i0) / bn, (half * I + i0 + Ip) / bn, 0, GH);
      } else {
        for (int64_t i = i0; i < i0 + Ip; ++i) {
          const int64_t r = (half * I + i) / bn;
          AppendBlock(s13, se, GH, sizeof(float), r, r + 1, 0, GH);
        }
      }
    }
    AppendBlock(w2, static_cast<const char*>(dn.data()) + e * H * I, I, 1, 0, H, i0, i0 + Ip);
    const float* de = sdn.data() + e * nH * GI;
    for (int64_t r = 0; r < (blocks ? nH : H); ++r) {
      const int64_t sr = blocks ? r : r / bn;
      AppendBlock(s2, de, GI, sizeof(float), sr, sr + 1, g0, g0 + GIp);
    }
  }
  m.s_.intermediate = Ip;
  m.fp8_ = m.group_scaled_ = true;
  m.block_n_ = obn;
  m.block_k_ = bk;
  m.amax_floor_ = vt::kFp8BlockAmaxFloor;
  m.scale_floor_ = 0.0f;
  const int64_t rows13 = blocks ? 2 * (Ip / bn) : 2 * Ip, rows2 = blocks ? nH : H;
  m.w_gate_up_ = WeightOnDevice(HostTensor(w13, {E * 2 * Ip, H}, vt::DType::kF8E4M3), lc.device);
  m.w_down_ = WeightOnDevice(HostTensor(w2, {E * H, Ip}, vt::DType::kF8E4M3), lc.device);
  m.w_gate_up_ = LaidOutOnCpu(lc, m.w_gate_up_);
  m.w_down_ = LaidOutOnCpu(lc, m.w_down_);
  m.s_gate_up_ = WeightOnDevice(HostTensor(s13, {E * rows13, GH}, vt::DType::kF32), lc.device);
  m.s_down_ = WeightOnDevice(HostTensor(s2, {E * rows2, GIp}, vt::DType::kF32), lc.device);
}

void SparseMoeBlock::ForwardGroupScaled(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& out,
                                        const vt::Tensor& ids, const vt::Tensor& weights,
                                        ActivationBuffers& buf, const vt::Tensor* given_x8,
                                        const vt::Tensor* given_x_scales) const {
  const int64_t T = x.dim(0), H = s_.hidden, GH = s_gate_up_.dim(1);
  VT_CHECK((given_x8 == nullptr) == (given_x_scales == nullptr),
           "SparseMoeBlock: group-scaled FP8 experts take a quantized input with its scales, or neither");
  const vt::Tensor x8 = given_x8 != nullptr ? *given_x8 : buf.Get(kSlotX8, T, H, vt::DType::kF8E4M3);
  const vt::Tensor xs = given_x_scales != nullptr ? *given_x_scales : buf.Get(kSlotX8Scales, T, GH, vt::DType::kF32);
  if (given_x8 == nullptr) vt::QuantFp8PerTokenGroup(q, x8, xs, x, block_k_, amax_floor_, scale_floor_);
  vt::MoeExpertsFp8GroupScaled(q, out, x8, xs, ids, weights, w_gate_up_, s_gate_up_, w_down_, s_down_, block_n_,
                               block_k_, amax_floor_, scale_floor_);
}

}  // namespace vtllm::model
