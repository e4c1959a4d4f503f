#include "model/layers/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "model/checkpoint.h"
#include "model/load_error.h"
#include "model/layers/activation_buffers.h"
#include "model/quant_config.h"
#include "vt/detail/numerics.h"
#include "vt/error.h"
#include "vt/ops/cast.h"
#include "vt/ops/fused.h"
#include "vt/ops/matmul.h"
#include "vt/ops/quant.h"
#include "vt/prepared.h"

namespace vtllm::model {

namespace {

// Stacks the rows of same-dtype [N_i, K] tensors into one [sum N_i, K] CPU tensor; a single
// part is returned as is (zero-copy from the checkpoint's mapping).
vt::Tensor StackRows(const std::vector<vt::Tensor>& parts) {
  if (parts.size() == 1) return parts[0];
  int64_t rows = 0;
  for (const vt::Tensor& p : parts) rows += p.dim(0);
  const vt::Shape shape = parts[0].ndim() == 2 ? vt::Shape{rows, parts[0].dim(1)} : vt::Shape{rows};
  vt::Tensor out = vt::Tensor::Empty(shape, parts[0].dtype(), vt::Device::Cpu());
  char* dst = static_cast<char*>(out.data());
  for (const vt::Tensor& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

// A row-parallel shard's block of columns [col_offset, col_offset + in_features) of its
// stored weight (of its rows, when it is also a block of rows), copied to a contiguous CPU
// tensor. The bytes are the stored ones: an FP8 shard keeps the per-tensor scale.
vt::Tensor ColumnBlock(const Checkpoint& ckpt, const LinearShard& s, vt::DType dtype, int64_t in_features) {
  const std::string name = s.prefix + ".weight";
  VT_CHECK(s.col_offset >= 0 && in_features > 0 && s.col_offset + in_features <= s.stored_cols, "linear ", s.prefix,
           ": columns [", s.col_offset, ", ", s.col_offset + in_features, ") of a weight of ", s.stored_cols,
           " columns");
  const int64_t rows = s.stored_rows == 0 ? s.out_features : s.stored_rows;
  VT_CHECK(s.row_offset >= 0 && s.row_offset + s.out_features <= rows, "linear ", s.prefix, ": rows [",
           s.row_offset, ", ", s.row_offset + s.out_features, ") of a weight of ", rows, " rows");
  const vt::Tensor full = ckpt.GetAs(name, dtype, {rows, s.stored_cols});
  vt::Tensor out = vt::Tensor::Empty({s.out_features, in_features}, dtype, vt::Device::Cpu());
  const size_t es = vt::DTypeSize(dtype), row_bytes = static_cast<size_t>(in_features) * es;
  const char* src = static_cast<const char*>(full.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t r = 0; r < s.out_features; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                src + static_cast<size_t>((s.row_offset + r) * s.stored_cols + s.col_offset) * es, row_bytes);
  return out;
}

// The bias of a shard: its rows of the stored bias. A row-parallel shard's bias is refused.
vt::Tensor ShardBias(const Checkpoint& ckpt, const LinearShard& s) {
  VT_CHECK(s.stored_cols == 0, "linear ", s.prefix,
           ": a row-parallel (column-split) shard cannot have a bias; tensor parallelism supports biases only "
           "on column-parallel layers");
  const std::string name = s.prefix + ".bias";
  const vt::DType dt = ckpt.Info(name).dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16;
  if (s.stored_rows == 0) return ckpt.GetAs(name, dt, {s.out_features});
  VT_CHECK(s.row_offset >= 0 && s.row_offset + s.out_features <= s.stored_rows, "linear ", s.prefix, ": rows [",
           s.row_offset, ", ", s.row_offset + s.out_features, ") of a bias of ", s.stored_rows, " rows");
  const vt::Tensor full = ckpt.GetAs(name, dt, {s.stored_rows});
  return vt::Tensor::FromHost(static_cast<const char*>(full.data()) + s.row_offset * vt::DTypeSize(dt),
                              {s.out_features}, dt, vt::Device::Cpu());
}

// The shard's rows of its stored weight, checked against the stored shape.
vt::Tensor ShardWeight(const Checkpoint& ckpt, const LinearShard& s, vt::DType dtype, int64_t in_features) {
  if (s.stored_cols != 0) return ColumnBlock(ckpt, s, dtype, in_features);
  const std::string name = s.prefix + ".weight";
  if (s.stored_rows == 0) return ckpt.GetAs(name, dtype, {s.out_features, in_features});
  VT_CHECK(s.row_offset >= 0 && s.row_offset + s.out_features <= s.stored_rows, "linear ", s.prefix, ": rows [",
           s.row_offset, ", ", s.row_offset + s.out_features, ") of a weight of ", s.stored_rows, " rows");
  return ckpt.GetAs(name, dtype, {s.stored_rows, in_features}).Slice(0, s.row_offset, s.row_offset + s.out_features);
}

}  // namespace

std::vector<float> ReadWeightScales(const Checkpoint& ckpt, const std::string& prefix, const std::string& scale,
                                    int64_t rows, int64_t cols) {
  if (!ckpt.Has(scale))
    ThrowLoadError(ckpt.dir(), ": tensor '", scale, "' is missing (the scales of FP8 weight '", prefix, ".weight')");
  const vt::DType dt = ckpt.Info(scale).dtype == vt::DType::kBF16 ? vt::DType::kBF16 : vt::DType::kF32;
  const vt::Tensor sc = ckpt.GetAs(scale, dt, {rows, cols});
  std::vector<float> f(static_cast<size_t>(rows * cols));
  for (size_t e = 0; e < f.size(); ++e) {
    const float v = dt == vt::DType::kF32 ? sc.data_as<float>()[e] : vt::Bf16ToFloat(sc.data_as<uint16_t>()[e]);
    if (!(std::isfinite(v) && v > 0.0f))
      ThrowLoadError(ckpt.FileOf(scale), ": tensor '", scale, "' holds ", v, " at element ", e,
                     "; FP8 weight scales must be finite and > 0");
    f[e] = v;
  }
  return f;
}

namespace {

// The CPU may multiply a copy of a linear's weight laid out for its kernels (vt::PrepareWeight
// with WeightUse::kMatmulB, made now for the whole weight and each shard starting at
// shard_rows). Where it does, nothing reads the weight's own bytes again: a merged or
// requantized copy (memory vt allocated) is freed, and the pages of one borrowed from the
// checkpoint's mapping are handed back (they stay readable: a tied lm_head's embedding rows
// read them). Returns whether the plain bytes were released either way.
bool PrepareForCpuKernels(const vt::Queue& host_queue, vt::Tensor& weight, std::span<const int64_t> shard_rows,
                          const Checkpoint& ckpt) {
  weight = vt::PrepareWeight(host_queue, weight, vt::WeightUse::kMatmulB, shard_rows);
  if (weight.backend_layout() == nullptr) return false;
  return weight.ReleaseBytes() || ckpt.DropPages(weight);
}

class UnquantizedLinearMethod final : public LinearMethod {
 public:
  explicit UnquantizedLinearMethod(vt::DType act_dtype) : act_dtype_(act_dtype) {}
  void LoadWeights(const Checkpoint& ckpt, std::span<const LinearShard> shards, int64_t in_features) override {
    ckpt_ = &ckpt;
    int64_t row = 0;
    for (const LinearShard& s : shards) {
      shard_rows_.push_back(row);
      row += s.out_features;
      const std::string name = s.prefix + ".weight";
      const TensorInfo& info = ckpt.Info(name);
      const vt::DType dt = info.dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16;
      parts_.push_back(ShardWeight(ckpt, s, dt, in_features));
    }
  }
  void ProcessWeightsAfterLoading(const vt::Queue& host_queue, vt::Device device) override {
    for (const vt::Tensor& p : parts_)
      VT_CHECK(p.dtype() == parts_[0].dtype(), "linear: merged shards have different dtypes (",
               p.Describe(), " vs ", parts_[0].Describe(), ")");
    weight_ = WeightOnDevice(StackRows(parts_), device);
    parts_.clear();
    // The CPU's vdpbf16ps level lays out BF16 weights, for BF16 activations only.
    if (device.is_cpu() && weight_.dtype() == act_dtype_)
      bytes_released_ = PrepareForCpuKernels(host_queue, weight_, shard_rows_, *ckpt_);
    ckpt_ = nullptr;
  }
  void Apply(const vt::Queue& q, const vt::Tensor& out, const vt::Tensor& x, int64_t n0, int64_t n1,
             const vt::Tensor* bias) override {
    const vt::Tensor w = (n0 == 0 && n1 == weight_.dim(0)) ? weight_ : weight_.Slice(0, n0, n1);
    vt::Matmul(q, out, x, w, bias);
  }
  int64_t weight_bytes() const override { return static_cast<int64_t>(weight_.nbytes()); }
  bool weight_bytes_released() const override { return bytes_released_; }
  const char* name() const override { return "unquantized"; }

 private:
  std::vector<vt::Tensor> parts_;
  std::vector<int64_t> shard_rows_;  // first row of each shard in the merged weight
  bool bytes_released_ = false;  // freed, or the checkpoint pages handed back
  const Checkpoint* ckpt_ = nullptr;  // during loading
  vt::DType act_dtype_;
  vt::Tensor weight_;
};

class Fp8StaticLinearMethod final : public LinearMethod {
 public:
  void LoadWeights(const Checkpoint& ckpt, std::span<const LinearShard> shards, int64_t in_features) override {
    ckpt_ = &ckpt;
    int64_t row = 0;
    for (const LinearShard& s : shards) {
      shard_rows_.push_back(row);
      row += s.out_features;
      parts_.push_back(ShardWeight(ckpt, s, vt::DType::kF8E4M3, in_features));
      const float ws = ckpt.GetScaleF32(s.prefix + ".weight_scale");
      const float is = ckpt.GetScaleF32(s.prefix + ".input_scale");
      weight_scales_.push_back(ws);
      input_scale_ = std::max(input_scale_, is);
      for (const std::string& m : s.merged_with) {
        merged_weight_scale_ = std::max(merged_weight_scale_, ckpt.GetScaleF32(m + ".weight_scale"));
        input_scale_ = std::max(input_scale_, ckpt.GetScaleF32(m + ".input_scale"));
      }
    }
  }
  void ProcessWeightsAfterLoading(const vt::Queue& host_queue, vt::Device device) override {
    const float max_ws =
        std::max(*std::max_element(weight_scales_.begin(), weight_scales_.end()), merged_weight_scale_);
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (weight_scales_[i] == max_ws) continue;
      vt::Tensor re = vt::Tensor::Empty(parts_[i].shape(), vt::DType::kF8E4M3, vt::Device::Cpu());
      RequantizeFp8(host_queue, re, parts_[i], weight_scales_[i], max_ws);
      parts_[i] = re;
    }
    weight_scale_ = max_ws;
    weight_ = WeightOnDevice(StackRows(parts_), device);
    parts_.clear();
    if (device.is_cpu()) bytes_released_ = PrepareForCpuKernels(host_queue, weight_, shard_rows_, *ckpt_);
    ckpt_ = nullptr;
  }
  void Apply(const vt::Queue& q, const vt::Tensor& out, const vt::Tensor& x8, int64_t n0, int64_t n1,
             const vt::Tensor* bias) override {
    const vt::Tensor w = (n0 == 0 && n1 == weight_.dim(0)) ? weight_ : weight_.Slice(0, n0, n1);
    vt::MatmulFp8(q, out, x8, w, input_scale_ * weight_scale_, bias);
  }
  bool takes_quantized_input() const override { return true; }
  float input_scale() const override { return input_scale_; }
  bool ApplySiluMulQuant(const vt::Queue& q, const vt::Tensor& x8, const vt::Tensor& gate_up, const vt::Tensor& out8,
                         float input_scale) override {
    vt::MatmulFp8SiluMulQuantFp8(q, out8, gate_up, x8, weight_, input_scale_ * weight_scale_, input_scale);
    return true;
  }
  int64_t weight_bytes() const override { return static_cast<int64_t>(weight_.nbytes()); }
  bool weight_bytes_released() const override { return bytes_released_; }
  const char* name() const override { return "fp8-static"; }

 private:
  std::vector<vt::Tensor> parts_;
  std::vector<float> weight_scales_;
  std::vector<int64_t> shard_rows_;  // first row of each shard in the merged weight
  float input_scale_ = 0.0f, weight_scale_ = 1.0f;
  float merged_weight_scale_ = 0.0f;  // the largest of LinearShard::merged_with's weight scales
  bool bytes_released_ = false;  // freed, or the checkpoint pages handed back
  const Checkpoint* ckpt_ = nullptr;  // during loading
  vt::Tensor weight_;
};

// FP8 weights with scales per block of rows and columns (block FP8: [ceil(N/bn),
// ceil(K/bk)] `weight_scale_inv`) or per row (per-channel: `weight_scale` [N, 1]), and
// activations quantized at run time per token and bk columns (QuantFp8PerTokenGroup with the
// format's floors; per-channel: bk = K) into a scratch of its own; the GEMM is
// MatmulFp8GroupScaled. Merged shards keep their own scales (no requantization), and so do
// shards that are row blocks of a stored weight (Qwen3-Next's in_proj_qkvz read as q, k, v,
// z; the gated attention's q rows and gate rows of q_proj): each weight row keeps the scale
// row it has in its stored tensor (block FP8: stored row r reads scale row r / bn, whichever
// shard it lands in). The linear's scales are laid out in blocks of bn rows when every shard
// starts on a multiple of bn in the merged weight and every such block reads one stored scale
// row (the stored order, e.g. 128-row shards of a 128-block format), else with one scale row
// per weight row (MatmulFp8GroupScaled's block_n = 1, k groups kept): 4 bytes per row and k
// group, about 3% of the weight at bk = 128.
// Online FP8 (`online`) reads BF16/F32 weights and quantizes them here, per tensor: one scale
// over the stored tensors the shards read (the merged weight; vLLM's scaled_fp8_quant with no
// scale), s = amax / 448 and
// q = e4m3(w * (1 / s)) as QuantFp8Static computes it; that scale repeated per row is the
// per-channel layout, so the rest is the per-token path.
class Fp8DynamicLinearMethod final : public LinearMethod {
 public:
  Fp8DynamicLinearMethod(bool block, int64_t block_n, int64_t block_k, bool online = false,
                         OnlineFp8AmaxCache* amax_cache = nullptr)
      : block_(block),
        online_(online),
        amax_cache_(amax_cache),
        block_n_cfg_(block ? block_n : 1),
        block_k_cfg_(block_k) {}

  void LoadWeights(const Checkpoint& ckpt, std::span<const LinearShard> shards, int64_t in_features) override {
    block_k_ = block_ ? block_k_cfg_ : in_features;
    if (online_) {
      // The scale is taken over every stored tensor the shards read, whole: a shard that is a
      // block of rows of a larger weight (Qwen3-Next's in_proj_qkvz) gets that weight's
      // scale, as `vtllm quantize` writes one per stored tensor and vLLM's online FP8 gives
      // its merged in_proj_qkvz one; shards of several tensors (a merge) get the largest.
      for (const LinearShard& s : shards) {
        const std::string name = s.prefix + ".weight";
        const vt::DType dt = ckpt.Info(name).dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16;
        parts_.push_back(ShardWeight(ckpt, s, dt, in_features));
        std::vector<std::string> scale_from = {name};
        for (const std::string& m : s.merged_with) scale_from.push_back(m + ".weight");
        for (const std::string& n : scale_from) {
          if (std::find(online_stored_.begin(), online_stored_.end(), n) != online_stored_.end()) continue;
          online_stored_.push_back(n);
          if (const float* a = amax_cache_ ? amax_cache_->Find(n) : nullptr) {  // scanned by another linear
            online_amax_ = std::max(online_amax_, *a);
            continue;
          }
          // The whole tensor as stored (the shard's own rows and columns are checked above).
          const vt::DType ndt = ckpt.Info(n).dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16;
          online_scale_parts_.push_back(
              {ckpt.GetAs(n, ndt, ckpt.Info(n).shape), ckpt.FileOf(n) + ": tensor '" + n + "'", 0});
          online_scale_names_.push_back(n);
        }
      }
      return;
    }
    const int64_t kb = block_ ? (in_features + block_k_ - 1) / block_k_ : 1;
    std::vector<std::vector<float>> stored;  // each stored scale tensor the shards read, [rows, kb]
    std::vector<std::string> stored_names;
    std::vector<std::pair<size_t, int64_t>> row_scale;  // per merged row: (stored tensor, its scale row)
    std::vector<int64_t> starts;                        // each shard's first row in the merged weight
    for (const LinearShard& s : shards) {
      if (s.stored_cols != 0)
        ThrowLoadError(ckpt.dir(), ": '", s.prefix, ".weight' is split by columns (tensor parallelism), which ",
                       name(), " FP8 (per-row or per-block scales) does not support yet");
      starts.push_back(static_cast<int64_t>(row_scale.size()));
      parts_.push_back(ShardWeight(ckpt, s, vt::DType::kF8E4M3, in_features));
      const std::string scale = s.prefix + (block_ ? ".weight_scale_inv" : ".weight_scale");
      auto it = std::find(stored_names.begin(), stored_names.end(), scale);
      if (it == stored_names.end()) {
        const int64_t rows = s.stored_rows == 0 ? s.out_features : s.stored_rows;
        stored.push_back(ReadWeightScales(ckpt, s.prefix, scale, (rows + block_n_cfg_ - 1) / block_n_cfg_, kb));
        stored_names.push_back(scale);
        it = stored_names.end() - 1;
      }
      const size_t t = static_cast<size_t>(it - stored_names.begin());
      for (int64_t r = 0; r < s.out_features; ++r) row_scale.emplace_back(t, (s.row_offset + r) / block_n_cfg_);
    }
    // Blocks of block_n_cfg_ rows where the merged weight allows it, else one scale row per row.
    const int64_t N = static_cast<int64_t>(row_scale.size());
    bool blocks = block_n_cfg_ > 1;
    for (int64_t m0 : starts) blocks = blocks && m0 % block_n_cfg_ == 0;
    for (int64_t m = 0; blocks && m < N; ++m) blocks = row_scale[m] == row_scale[m - m % block_n_cfg_];
    block_n_ = blocks ? block_n_cfg_ : 1;
    const int64_t rows = (N + block_n_ - 1) / block_n_;
    vt::Tensor sc = vt::Tensor::Empty({rows, kb}, vt::DType::kF32, vt::Device::Cpu());
    for (int64_t j = 0; j < rows; ++j) {
      const auto& [t, r] = row_scale[j * block_n_];
      std::copy_n(stored[t].data() + r * kb, kb, sc.data_as<float>() + j * kb);
    }
    scale_parts_ = {sc};
  }
  void ProcessWeightsAfterLoading(const vt::Queue& host_queue, vt::Device device) override {
    if (online_) QuantizeOnline(host_queue);
    weight_ = WeightOnDevice(StackRows(parts_), device);
    // The CPU's AVX2 level lays out a weight whose codes hold no NaN for its outer-product
    // tiles (MatmulFp8's layout); its kernels then read only that copy, so the stored bytes go.
    if (device.is_cpu()) {
      weight_ = vt::PrepareWeight(host_queue, weight_, vt::WeightUse::kMatmulGroupScaledB);
      if (weight_.backend_layout() != nullptr) weight_.ReleaseBytes();
    }
    scales_ = WeightOnDevice(StackRows(scale_parts_), device);
    parts_.clear();
    scale_parts_.clear();
  }
  void Apply(const vt::Queue& q, const vt::Tensor& out, const vt::Tensor& x, int64_t n0, int64_t n1,
             const vt::Tensor* bias) override {
    const int64_t T = x.dim(0), K = weight_.dim(1), G = (K + block_k_ - 1) / block_k_;
    if (!x8_.defined() || x8_.dim(0) < T) {
      x8_ = vt::Tensor::Empty({T, K}, vt::DType::kF8E4M3, q.device());
      xs_ = vt::Tensor::Empty({T, G}, vt::DType::kF32, q.device());
      ++StepBufferGeneration();
    }
    const vt::Tensor x8 = x8_.Slice(0, 0, T), xs = xs_.Slice(0, 0, T);
    const Fp8GroupQuant g = GroupQuant();
    vt::QuantFp8PerTokenGroup(q, x8, xs, x, g.group_size, g.amax_floor, g.scale_floor);
    ApplyGroupQuantized(q, out, x8, xs, n0, n1, bias);
  }
  std::optional<Fp8GroupQuant> input_group_quant() const override { return GroupQuant(); }
  void ApplyGroupQuantized(const vt::Queue& q, const vt::Tensor& out, const vt::Tensor& x8, const vt::Tensor& xs,
                           int64_t n0, int64_t n1, const vt::Tensor* bias) override {
    const bool all = n0 == 0 && n1 == weight_.dim(0);
    const vt::Tensor w = all ? weight_ : weight_.Slice(0, n0, n1);
    // Scale rows of [n0, n1): whole blocks, since in the block layout shards start on block rows.
    const int64_t r0 = n0 / block_n_, r1 = (n1 + block_n_ - 1) / block_n_;
    const vt::Tensor s = all ? scales_ : scales_.Slice(0, r0, r1);
    vt::MatmulFp8GroupScaled(q, out, x8, xs, w, s, block_n_, block_k_, bias);
  }
  int64_t weight_bytes() const override { return static_cast<int64_t>(weight_.nbytes() + scales_.nbytes()); }
  const char* name() const override { return online_ ? "fp8-online" : block_ ? "fp8-block" : "fp8-channel-token"; }

 private:
  // parts_ (BF16/F32 shards) -> one F8E4M3 part and its per-row scales, all equal.
  void QuantizeOnline(const vt::Queue& host_queue) {
    for (const vt::Tensor& p : parts_)
      VT_CHECK(p.dtype() == parts_[0].dtype(), "linear: merged shards have different dtypes (", p.Describe(),
               " vs ", parts_[0].Describe(), ")");
    for (const OnlineFp8Part& p : online_scale_parts_)
      VT_CHECK(p.values.dtype() == parts_[0].dtype(), "linear: merged shards have different dtypes (",
               p.values.Describe(), " vs ", parts_[0].Describe(), ")");
    int64_t rows = 0;
    for (const vt::Tensor& p : parts_) rows += p.dim(0);
    vt::Tensor w8 = vt::Tensor::Empty({rows, parts_[0].dim(1)}, vt::DType::kF8E4M3, vt::Device::Cpu());
    // amax / 448 over the stored tensors, as Fp8OnlineScale; each scanned once per load.
    for (size_t i = 0; i < online_scale_parts_.size(); ++i) {
      const float a = Fp8OnlineAmax(host_queue, online_scale_parts_[i]);
      if (amax_cache_) amax_cache_->Add(online_scale_names_[i], a);
      online_amax_ = std::max(online_amax_, a);
    }
    const float scale = online_amax_ / 448.0f > 0.0f ? online_amax_ / 448.0f : 1.0f;
    vt::QuantFp8Static(host_queue, w8, StackRows(parts_), scale);
    vt::Tensor s = vt::Tensor::Empty({rows, 1}, vt::DType::kF32, vt::Device::Cpu());
    std::fill(s.data_as<float>(), s.data_as<float>() + s.numel(), scale);
    parts_ = {w8};
    scale_parts_ = {s};
    online_scale_parts_.clear();
    online_scale_names_.clear();
    online_stored_.clear();
  }

  // Block FP8: groups of block_k_ columns with its floors; per-channel/per-token and online:
  // one group per row (block_k_ = K) with the per-token floors.
  Fp8GroupQuant GroupQuant() const {
    if (block_) return {block_k_, vt::kFp8BlockAmaxFloor, 0.0f};
    return {block_k_, 0.0f, vt::kFp8PerTokenScaleFloor};
  }

  bool block_, online_;
  // Online: the stored tensors the shards read (names), those of them to scan (whole, and
  // their names), and the amax of those scanned before (amax_cache_).
  std::vector<std::string> online_stored_;
  std::vector<OnlineFp8Part> online_scale_parts_;
  std::vector<std::string> online_scale_names_;
  float online_amax_ = 0.0f;
  OnlineFp8AmaxCache* amax_cache_;
  int64_t block_n_cfg_, block_k_cfg_, block_k_ = 0;
  int64_t block_n_ = 1;  // rows per scale row of scales_ (block_n_cfg_, or 1: LoadWeights)
  std::vector<vt::Tensor> parts_, scale_parts_;
  vt::Tensor weight_, scales_;
  vt::Tensor x8_, xs_;  // the quantized activation and its scales
};

}  // namespace

std::unique_ptr<LinearMethod> MakeUnquantizedLinearMethod(vt::DType act_dtype) {
  return std::make_unique<UnquantizedLinearMethod>(act_dtype);
}
std::unique_ptr<LinearMethod> MakeFp8StaticLinearMethod() { return std::make_unique<Fp8StaticLinearMethod>(); }

float QuantizeFp8Online(const vt::Queue& host_queue, std::span<const OnlineFp8Part> parts, const vt::Tensor& out) {
  const float scale = Fp8OnlineScale(host_queue, parts);
  std::vector<vt::Tensor> values;
  for (const OnlineFp8Part& part : parts) values.push_back(part.values);
  vt::QuantFp8Static(host_queue, out, StackRows(values), scale);
  return scale;
}

float Fp8OnlineScale(const vt::Queue& host_queue, std::span<const OnlineFp8Part> parts) {
  VT_CHECK(!parts.empty(), "Fp8OnlineScale: no parts");
  float amax = 0.0f;
  for (const OnlineFp8Part& part : parts) {
    VT_CHECK(part.values.dtype() == parts[0].values.dtype(),
             "Fp8OnlineScale: parts must be of one dtype, got ", part.values.Describe());
    amax = std::max(amax, Fp8OnlineAmax(host_queue, part));
  }
  // An all-zero weight quantizes to zeros with any scale.
  const float scale = amax / 448.0f;
  return scale > 0.0f ? scale : 1.0f;
}

float Fp8OnlineAmax(const vt::Queue& host_queue, const OnlineFp8Part& part) {
  const vt::Tensor& p = part.values;
  VT_CHECK(p.device().is_cpu() && p.is_contiguous() && (p.dtype() == vt::DType::kF32 || p.dtype() == vt::DType::kBF16),
           "Fp8OnlineAmax: a part must be a contiguous CPU tensor, F32 or BF16, got ", p.Describe());
  const bool f32 = p.dtype() == vt::DType::kF32;
  std::mutex mu;
  float part_max = 0.0f;
  int64_t bad = -1;
  host_queue.ParallelFor(p.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    float m = 0.0f;
    int64_t first_bad = -1;
    for (int64_t j = b; j < e; ++j) {
      const float v = f32 ? p.data_as<float>()[j] : vt::Bf16ToFloat(p.data_as<uint16_t>()[j]);
      if (!std::isfinite(v) && first_bad < 0) first_bad = j;
      m = std::max(m, std::fabs(v));
    }
    std::lock_guard<std::mutex> lock(mu);
    part_max = std::max(part_max, m);
    if (first_bad >= 0 && (bad < 0 || first_bad < bad)) bad = first_bad;
  });
  if (bad >= 0)
    ThrowLoadError(part.name, " holds a NaN or Inf at element ", part.first_element + bad,
                   "; online FP8 (--quantization fp8) cannot quantize it");
  return part_max;
}

const float* OnlineFp8AmaxCache::Find(const std::string& name) const {
  auto it = amax_.find(name);
  return it == amax_.end() ? nullptr : &it->second;
}

void OnlineFp8AmaxCache::Add(const std::string& name, float amax) {
  amax_[name] = amax;
  ++scans_;
}

void RequantizeFp8(const vt::Queue& host_queue, const vt::Tensor& out, const vt::Tensor& weight, float scale,
                   float new_scale) {
  VT_CHECK(weight.dtype() == vt::DType::kF8E4M3 && weight.is_contiguous() && weight.device().is_cpu(),
           "RequantizeFp8: weight must be a contiguous CPU F8E4M3 tensor, got ", weight.Describe());
  // Exact values (the vector fp8 cast), times the old scale in f32, quantized with the new.
  vt::Tensor deq = vt::Tensor::Empty(weight.shape(), vt::DType::kF32, vt::Device::Cpu());
  vt::Cast(host_queue, deq, weight);
  float* v = deq.data_as<float>();
  host_queue.ParallelFor(weight.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[i] *= scale;
  });
  vt::QuantFp8Static(host_queue, out, deq, new_scale);
}

Linear Linear::Load(const LinearContext& ctx, std::vector<LinearShard> shards, int64_t in_features, bool bias) {
  VT_CHECK(!shards.empty(), "Linear::Load: no shards");
  const bool fp8 = IsFp8(ctx.quant->method) && ctx.quant->IsQuantized(shards[0].prefix);
  for (const LinearShard& s : shards)
    VT_CHECK((IsFp8(ctx.quant->method) && ctx.quant->IsQuantized(s.prefix)) == fp8, "linear ",
             s.prefix, ": merged with ", shards[0].prefix,
             " but the quantization config quantizes one and not the other");
  Linear lin;
  lin.in_features_ = in_features;
  lin.offsets_.push_back(0);
  for (const LinearShard& s : shards) lin.offsets_.push_back(lin.offsets_.back() + s.out_features);
  std::unique_ptr<LinearMethod> method;
  if (!fp8)
    method = MakeUnquantizedLinearMethod(ctx.act_dtype);
  else if (ctx.quant->method == QuantMethod::kFp8Static)
    method = MakeFp8StaticLinearMethod();
  else if (ctx.quant->method == QuantMethod::kFp8Online)
    method = std::make_unique<Fp8DynamicLinearMethod>(false, 1, in_features, /*online=*/true, ctx.amax_cache);
  else
    method = std::make_unique<Fp8DynamicLinearMethod>(ctx.quant->method == QuantMethod::kFp8Block,
                                                     ctx.quant->block_n, ctx.quant->block_k);
  method->LoadWeights(*ctx.checkpoint, shards, in_features);
  method->ProcessWeightsAfterLoading(*ctx.host_queue, ctx.device);
  lin.method_ = std::move(method);
  if (ctx.observer) {
    lin.observer_ = ctx.observer;
    for (const LinearShard& s : shards) lin.prefixes_.push_back(s.prefix);
  }
  if (bias) {
    std::vector<vt::Tensor> parts;
    for (const LinearShard& s : shards) {
      parts.push_back(ShardBias(*ctx.checkpoint, s));
    }
    for (const vt::Tensor& p : parts)
      VT_CHECK(p.dtype() == parts[0].dtype(), "linear ", shards[0].prefix, ": shard biases have different dtypes");
    lin.bias_ = WeightOnDevice(StackRows(parts), ctx.device);
  }
  return lin;
}

int64_t Linear::weight_bytes() const {
  return method_->weight_bytes() + (bias_.defined() ? static_cast<int64_t>(bias_.nbytes()) : 0);
}

vt::Tensor Linear::QuantizedInput(const vt::Queue& q, const vt::Tensor& x) const {
  if (x.dtype() == vt::DType::kF8E4M3) return x;
  const int64_t T = x.dim(0);
  if (!quantized_.defined() || quantized_.dim(0) < T) {
    quantized_ = vt::Tensor::Empty({T, in_features_}, vt::DType::kF8E4M3, q.device());
    ++StepBufferGeneration();
  }
  const vt::Tensor x8 = quantized_.Slice(0, 0, T);
  vt::QuantFp8Static(q, x8, x, method_->input_scale());
  return x8;
}

void LinearMethod::ApplyGroupQuantized(const vt::Queue& /*q*/, const vt::Tensor& /*out*/, const vt::Tensor& /*x8*/,
                                       const vt::Tensor& /*x_scales*/, int64_t /*n0*/, int64_t /*n1*/,
                                       const vt::Tensor* /*bias*/) {
  throw vt::Error(vt::StrCat("linear (", name(), "): given an input quantized per token group, which this method "
                             "does not take (it has no input_group_quant)"));
}

LinearInput Linear::GroupQuantizedInput(const vt::Queue& q, const vt::Tensor& x) const {
  const std::optional<Fp8GroupQuant> g = method_->input_group_quant();
  if (!g || x.dtype() == vt::DType::kF8E4M3) return x;
  const int64_t T = x.dim(0), G = g->Groups(in_features_);
  if (!quantized_.defined() || quantized_.dim(0) < T || !quantized_scales_.defined()) {
    quantized_ = vt::Tensor::Empty({T, in_features_}, vt::DType::kF8E4M3, q.device());
    quantized_scales_ = vt::Tensor::Empty({T, G}, vt::DType::kF32, q.device());
    ++StepBufferGeneration();
  }
  const vt::Tensor x8 = quantized_.Slice(0, 0, T), xs = quantized_scales_.Slice(0, 0, T);
  vt::QuantFp8PerTokenGroup(q, x8, xs, x, g->group_size, g->amax_floor, g->scale_floor);
  return LinearInput{x8, xs};
}

void Linear::Apply(const vt::Queue& q, const LinearInput& x, const vt::Tensor& out) const {
  ApplyShards(q, x, std::span<const vt::Tensor>(&out, 1));
}

void Linear::ApplyShards(const vt::Queue& q, const LinearInput& x, std::span<const vt::Tensor> outs) const {
  const size_t num_shards = offsets_.size() - 1;
  VT_CHECK(outs.size() == 1 || outs.size() == num_shards, "linear: ", outs.size(), " outputs for ", num_shards,
           " shards");
  VT_CHECK(!x.group_quantized() || input_group_quant().has_value(), "linear (", method_->name(),
           "): given an input quantized per token group, which it does not take");
  if (observer_) observer_->Observe(q, prefixes_, x.x);
  // Several shards of a method that quantizes per token group share one quantization.
  const LinearInput in = !x.group_quantized() && outs.size() > 1 ? GroupQuantizedInput(q, x.x) : x;
  const bool grouped = in.group_quantized();
  const vt::Tensor input = !grouped && method_->takes_quantized_input() ? QuantizedInput(q, in.x) : in.x;
  for (size_t i = 0; i < outs.size(); ++i) {
    const int64_t n0 = outs.size() == 1 ? 0 : offsets_[i];
    const int64_t n1 = outs.size() == 1 ? offsets_.back() : offsets_[i + 1];
    vt::Tensor b;
    if (bias_.defined()) b = (n0 == 0 && n1 == bias_.dim(0)) ? bias_ : bias_.Slice(0, n0, n1);
    if (grouped)
      method_->ApplyGroupQuantized(q, outs[i], input, in.scales, n0, n1, bias_.defined() ? &b : nullptr);
    else
      method_->Apply(q, outs[i], input, n0, n1, bias_.defined() ? &b : nullptr);
  }
}

bool Linear::ApplySiluMulQuant(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& gate_up,
                               const vt::Tensor& out8, float input_scale) const {
  if (!method_->takes_quantized_input() || bias_.defined() || observer_ != nullptr) return false;
  return method_->ApplySiluMulQuant(q, QuantizedInput(q, x), gate_up, out8, input_scale);
}

SharedInputQuant SharedInputQuantOf(std::span<const Linear* const> linears) {
  SharedInputQuant sq;
  if (linears.empty()) return sq;
  const Linear& first = *linears.front();
  bool same_scale = true, same_group = first.input_group_quant().has_value();
  for (const Linear* l : linears) {
    same_scale = same_scale && l->takes_quantized_input() && l->input_scale() == first.input_scale();
    same_group = same_group && l->input_group_quant() == first.input_group_quant();
  }
  if (same_scale) sq.input_scale = first.input_scale();
  if (same_group) sq.group = first.input_group_quant();
  return sq;
}

LinearInput QuantizeShared(const vt::Queue& q, const vt::Tensor& x, const SharedInputQuant& sq,
                           ActivationBuffers& buffers) {
  const int64_t T = x.dim(0), K = x.dim(1);
  if (sq.input_scale) {
    const vt::Tensor x8 = buffers.Get(kSlotX8, T, K, vt::DType::kF8E4M3);
    vt::QuantFp8Static(q, x8, x, *sq.input_scale);
    return x8;
  }
  if (sq.group) {
    const vt::Tensor x8 = buffers.Get(kSlotX8, T, K, vt::DType::kF8E4M3);
    const vt::Tensor xs = buffers.Get(kSlotX8Scales, T, sq.group->Groups(K), vt::DType::kF32);
    vt::QuantFp8PerTokenGroup(q, x8, xs, x, sq.group->group_size, sq.group->amax_floor, sq.group->scale_floor);
    return LinearInput{x8, xs};
  }
  return x;
}

}  // namespace vtllm::model
