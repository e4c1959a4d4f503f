// Linear layers with vLLM's quantization-method lifecycle: a method loads its shards'
// weights from the checkpoint, processes them once after loading (merging shards,
// requantizing, moving them to the device), then applies them every step.
//
// A linear has one or more shards (q/k/v merged into qkv, gate/up into gate_up, as vLLM's
// QKVParallelLinear and MergedColumnParallelLinear do); its weight is the shards' rows
// stacked, [sum N_i, K], and its output the shards' columns side by side.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vt/queue.h"
#include "vt/tensor.h"

namespace vtllm::model {

class Checkpoint;
struct QuantConfig;

struct LinearShard {
  std::string prefix;  // e.g. "model.layers.0.self_attn.q_proj"
  int64_t out_features = 0;
  // A shard may be a block of rows of a larger stored weight (the per-head interleaved
  // projections of Qwen3-Next): rows [row_offset, row_offset + out_features) of a weight of
  // stored_rows rows. stored_rows 0: the weight has exactly out_features rows. Per-tensor
  // scales are the stored weight's (static FP8 reads them; online FP8 takes the amax of the
  // whole stored weight); per-row and per-block FP8 scales are the rows of the stored scales
  // that its rows fall in; the bias is the same rows of the stored bias.
  int64_t row_offset = 0;
  int64_t stored_rows = 0;
  // A row-parallel shard (tensor parallelism: o_proj, down_proj) takes a block of columns of
  // the stored weight: columns [col_offset, col_offset + in_features) of a weight of
  // stored_cols columns. stored_cols 0: the weight has exactly in_features columns.
  // Per-tensor scales are the stored weight's; a bias of such a shard is refused (the sum
  // over ranks would add it once per rank).
  int64_t col_offset = 0;
  int64_t stored_cols = 0;
  // Stored weights (prefixes) that vLLM merges with this one into one linear where vtllm loads
  // them as linears of their own (the gated attention's q_proj, k_proj and v_proj: vLLM's
  // qkv_proj). Per-tensor FP8 scales are taken over them as over a merge's shards: online, the
  // amax of all of them; static, the largest of their weight scales (this weight requantized
  // to it) and of their input scales. Ignored by the unquantized and per-row/per-block methods.
  std::vector<std::string> merged_with = {};
};

// This rank's place in a tensor-parallel group (Megatron-style sharding as vLLM does it):
// column-parallel layers keep rows [rank * N / size, (rank + 1) * N / size) of their weight,
// row-parallel ones the same block of columns, followed by a sum over the ranks.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  // Block `rank` of `n` split in `size` equal parts: its first index and length.
  int64_t Offset(int64_t n) const { return n / size * rank; }
  int64_t Part(int64_t n) const { return n / size; }
};

// Calibration (`vtllm quantize`): shown each linear's input before the linear is applied.
// Normal runs have none; a linear keeps its shards' names only when one is set.
class LinearInputObserver {
 public:
  virtual ~LinearInputObserver() = default;
  // x: the input [T, K] (F32 or BF16, on q's device) of the linear whose shards are `prefixes`.
  virtual void Observe(const vt::Queue& q, std::span<const std::string> prefixes, const vt::Tensor& x) = 0;
  // The routed experts of the sparse MoE block `prefix` ("model.layers.3.mlp."), per expert e:
  // tokens[e] routed to it in this call, gate_up_amax[e] = max |x| over those tokens (the input
  // of its gate and up projections) and down_amax[e] = max |Silu(g) · u| over them (the input
  // of its down projection), both 0 where tokens[e] is 0 and NaN where a value is not finite.
  virtual void ObserveExperts(const std::string& /*prefix*/, std::span<const int64_t> /*tokens*/,
                              std::span<const float> /*gate_up_amax*/, std::span<const float> /*down_amax*/) {}
};

// Online FP8 within one model load: amax(|W|) of each stored tensor already scanned, by name,
// so that the linears that read row blocks of one tensor (Qwen3-Next's q, k, v and z of
// in_proj_qkvz) or share a merge's scale (the gated attention's q_proj, k_proj, v_proj) scan
// it once.
class OnlineFp8AmaxCache {
 public:
  // The amax of `name`, or nullptr when it has not been scanned.
  const float* Find(const std::string& name) const;
  void Add(const std::string& name, float amax);
  int64_t scans() const { return scans_; }  // tensors scanned (Add calls)

 private:
  std::map<std::string, float> amax_;
  int64_t scans_ = 0;
};

// What a linear is built from: the checkpoint, its quantization config, where the weights go,
// and a CPU queue for the one-time processing after loading.
struct LinearContext {
  const Checkpoint* checkpoint = nullptr;
  const QuantConfig* quant = nullptr;
  vt::Device device;
  const vt::Queue* host_queue = nullptr;
  LinearInputObserver* observer = nullptr;  // calibration only
  OnlineFp8AmaxCache* amax_cache = nullptr;  // online FP8: shared by the load's linears; may be null
  // LoadOptions::fuse_quant: the layers built from this context may run a norm or activation
  // and the next linear's FP8 input quantization as one fused op (BF16 activations only).
  bool fuse_quant = true;
  // The model's activation dtype: an unquantized weight of that dtype may be laid out for
  // the CPU's kernels (they multiply such a copy only by activations of its dtype).
  vt::DType act_dtype = vt::DType::kF32;
};

// The activation quantization of a method that quantizes its input at run time per token and
// group of columns (block FP8, per-channel/per-token FP8, online FP8): QuantFp8PerTokenGroup
// with these operands. A caller may do it itself, fused with the op that makes the activation
// (vt::RmsNormQuantFp8PerTokenGroup, ...), and hand the linear the result.
struct Fp8GroupQuant {
  int64_t group_size = 0;
  float amax_floor = 0.0f;
  float scale_floor = 0.0f;
  // Scale columns of a row of `width` elements.
  int64_t Groups(int64_t width) const { return (width + group_size - 1) / group_size; }
  bool operator==(const Fp8GroupQuant&) const = default;
};

// A linear's input: the activation x [T, K] (F32/BF16, or F8E4M3 already quantized with a
// static-FP8 linear's input_scale()), or (scales defined) the FP8 activation x [T, K] already
// quantized as the linear's input_group_quant() says, with its scales [T, ceil(K / group_size)].
struct LinearInput {
  LinearInput(const vt::Tensor& x_) : x(x_) {}  // a plain activation converts implicitly
  LinearInput(const vt::Tensor& x8, const vt::Tensor& x_scales) : x(x8), scales(x_scales) {}
  int64_t rows() const { return x.dim(0); }
  bool group_quantized() const { return scales.defined(); }
  vt::Tensor x, scales;
};

// vLLM's LinearMethodBase: create/load weights -> process_weights_after_loading -> apply.
class LinearMethod {
 public:
  virtual ~LinearMethod() = default;
  // Reads the shards' weights (and scales) and checks their dtypes and shapes.
  virtual void LoadWeights(const Checkpoint& ckpt, std::span<const LinearShard> shards, int64_t in_features) = 0;
  // Merges the shards into one weight in its final form on `device`.
  virtual void ProcessWeightsAfterLoading(const vt::Queue& host_queue, vt::Device device) = 0;
  // out = x · W[n0:n1]ᵀ (+ bias). x is the activation [T, K] (or, for a method with
  // takes_quantized_input(), the FP8 activation already quantized with input_scale()).
  virtual void Apply(const vt::Queue& q, const vt::Tensor& out, const vt::Tensor& x, int64_t n0, int64_t n1,
                     const vt::Tensor* bias) = 0;
  virtual bool takes_quantized_input() const { return false; }
  virtual float input_scale() const { return 1.0f; }
  // A method that quantizes its input per token group: how (else nullopt), and Apply with
  // that quantization already done (x8 [T, K] F8E4M3, x_scales [T, groups] F32).
  virtual std::optional<Fp8GroupQuant> input_group_quant() const { return std::nullopt; }
  virtual void ApplyGroupQuantized(const vt::Queue& q, const vt::Tensor& out, const vt::Tensor& x8,
                                   const vt::Tensor& x_scales, int64_t n0, int64_t n1, const vt::Tensor* bias);
  // For a method with takes_quantized_input() whose weight is [gate | up]: the whole
  // weight's product of the FP8 x8 into BF16 gate_up and SiluMulQuantFp8 of it into out8 as
  // one op. Returns false when the method has none.
  virtual bool ApplySiluMulQuant(const vt::Queue& /*q*/, const vt::Tensor& /*x8*/, const vt::Tensor& /*gate_up*/,
                                 const vt::Tensor& /*out8*/, float /*input_scale*/) {
    return false;
  }
  virtual int64_t weight_bytes() const = 0;
  // The weight's own bytes were freed (or, borrowed from the checkpoint's mapping, their
  // pages handed back): its kernels read a copy laid out for them.
  virtual bool weight_bytes_released() const { return false; }
  virtual const char* name() const = 0;
};

// Unquantized weights (BF16 or F32 as stored) with vt::Matmul.
// act_dtype: the activations it multiplies (LinearContext::act_dtype).
std::unique_ptr<LinearMethod> MakeUnquantizedLinearMethod(vt::DType act_dtype);
// Static per-tensor FP8 W8A8 with vt::MatmulFp8: one input scale (the max of the shards'),
// the weight requantized to the max of the shards' weight scales.
std::unique_ptr<LinearMethod> MakeFp8StaticLinearMethod();

// The FP8 weight scales `scale` of the stored weight `prefix`.weight, [rows, cols] F32 or BF16
// as stored, widened to f32: a LoadError naming the tensor when it is missing or of another
// shape or dtype, or when a scale is not finite and > 0.
std::vector<float> ReadWeightScales(const Checkpoint& ckpt, const std::string& prefix, const std::string& scale,
                                    int64_t rows, int64_t cols);

// The requantization vLLM applies when merging FP8 shards: each byte decoded, multiplied by
// its shard's scale in f32, and quantized with `new_scale` exactly as QuantFp8Static does
// (multiply by 1/new_scale formed once, clamp, RNE). Bytes whose scale already equals
// new_scale are unchanged. Runs on a CPU queue.
void RequantizeFp8(const vt::Queue& host_queue, const vt::Tensor& out, const vt::Tensor& weight, float scale,
                   float new_scale);

// One part of a weight quantized by online FP8: its values (a contiguous CPU BF16/F32 tensor
// of rows), "FILE: tensor 'NAME'" of the stored tensor it comes from, and the element of
// that tensor its first element is (for messages).
struct OnlineFp8Part {
  vt::Tensor values;
  std::string name;
  int64_t first_element = 0;
};

// Online FP8 (`--quantization fp8`) of one weight made of `parts` (rows stacked, e.g. a
// merged gate/up): scale = amax(|W|) / 448 over all parts in f32 (1 when all are 0, as any
// scale quantizes zeros to zeros), and `out` [rows, K] F8E4M3 = QuantFp8Static(W, scale) (the
// reciprocal multiply). Returns the scale. A NaN or Inf is a LoadError naming the part's
// tensor and the element. Runs on a CPU queue.
float QuantizeFp8Online(const vt::Queue& host_queue, std::span<const OnlineFp8Part> parts, const vt::Tensor& out);
// The scale alone: amax(|W|) / 448 over all parts in f32, 1 when all are 0; the same checks.
float Fp8OnlineScale(const vt::Queue& host_queue, std::span<const OnlineFp8Part> parts);
// amax(|W|) of one part; a NaN or Inf is a LoadError as above.
float Fp8OnlineAmax(const vt::Queue& host_queue, const OnlineFp8Part& part);

class Linear {
 public:
  Linear() = default;
  // Builds and loads a linear of `shards` over `in_features` inputs, quantized when the
  // quantization config says its first shard is (all shards must agree), with a bias
  // `<prefix>.bias` per shard when `bias`.
  static Linear Load(const LinearContext& ctx, std::vector<LinearShard> shards, int64_t in_features, bool bias);

  // out: [T, N] of all shards. x group-quantized only when input_group_quant() says how.
  void Apply(const vt::Queue& q, const LinearInput& x, const vt::Tensor& out) const;
  // outs[i]: [T, N_i] of shard i, each contiguous (one input quantization for all).
  void ApplyShards(const vt::Queue& q, const LinearInput& x, std::span<const vt::Tensor> outs) const;
  // A [gate | up] linear without bias: gate_up = x · Wᵀ (BF16 [T, 2I]) and out8 =
  // SiluMulQuantFp8(gate_up, input_scale) as one op, x quantized first unless it is FP8.
  // Returns false (having done nothing) when the linear's method has no such op.
  bool ApplySiluMulQuant(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& gate_up, const vt::Tensor& out8,
                         float input_scale) const;

  bool takes_quantized_input() const { return method_->takes_quantized_input(); }
  float input_scale() const { return method_->input_scale(); }
  // The per-token-group quantization this linear applies to its input, when a caller may do
  // it instead (pass LinearInput{x8, scales}); nullopt for other methods and while an
  // observer (calibration) must see the unquantized input.
  std::optional<Fp8GroupQuant> input_group_quant() const {
    return observer_ != nullptr ? std::nullopt : method_->input_group_quant();
  }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return offsets_.back(); }
  int64_t weight_bytes() const;
  // The weight's bytes were freed, or their mapped pages handed back, after the CPU
  // kernels' own copy was laid out (LinearMethod::weight_bytes_released).
  bool weight_bytes_released() const { return method_->weight_bytes_released(); }
  const char* method_name() const { return method_->name(); }

 private:
  // x itself when it is FP8, else QuantFp8Static of it with the method's input scale in the
  // scratch quantized_ (grown when a step outgrows it).
  vt::Tensor QuantizedInput(const vt::Queue& q, const vt::Tensor& x) const;
  // For a method with input_group_quant(): x quantized per token group into the scratch
  // quantized_ / quantized_scales_, so that several shards share one quantization; else x.
  LinearInput GroupQuantizedInput(const vt::Queue& q, const vt::Tensor& x) const;

  std::shared_ptr<LinearMethod> method_;
  std::vector<int64_t> offsets_;  // shard i is columns [offsets_[i], offsets_[i+1])
  int64_t in_features_ = 0;
  vt::Tensor bias_;
  LinearInputObserver* observer_ = nullptr;
  std::vector<std::string> prefixes_;  // the shards' names, kept for observer_ only
  mutable vt::Tensor quantized_;  // scratch for the FP8 input when the caller passes BF16/F32
  mutable vt::Tensor quantized_scales_;  // and its per-token-group scales
};

class ActivationBuffers;

// Several linears over one input (a GDN layer's q/k/v/z, a gated attention's q/k/v/gate): the
// FP8 input quantization they all take, a static input scale or a per-token-group one;
// neither when they differ or one of them is not FP8 (each then quantizes for itself).
struct SharedInputQuant {
  std::optional<float> input_scale;
  std::optional<Fp8GroupQuant> group;
};
SharedInputQuant SharedInputQuantOf(std::span<const Linear* const> linears);
// x quantized once as `sq` says, into the buffers' x8 (and x8 scales) slots; x itself when
// sq has neither. The bytes are those each linear would make of x alone.
LinearInput QuantizeShared(const vt::Queue& q, const vt::Tensor& x, const SharedInputQuant& sq,
                           ActivationBuffers& buffers);

}  // namespace vtllm::model
