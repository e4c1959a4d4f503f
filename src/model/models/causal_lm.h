// The interface every architecture implements, and the registry that maps a checkpoint's
// `architectures[0]` to one.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/kv_cache.h"
#include "model/layers/linear.h"
#include "vt/comm.h"
#include "vt/op_id.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vtllm::model {

struct ModelConfig;
struct QuantConfig;
class LoadProgress;

// A step's attention inputs on the model's device (views of the model's persistent step
// buffers): the new tokens of sequence s are rows [query_start_loc[s], query_start_loc[s+1]).
struct AttentionMetadata {
  vt::Tensor positions;        // [T] I64
  vt::Tensor slot_mapping;     // [T] I64
  vt::Tensor block_tables;     // [S, stride] I32
  vt::Tensor seq_lens;         // [S] I32, context length after this step
  vt::Tensor query_start_loc;  // [S+1] I32
  vt::Tensor state_slots;      // [S] I32, each sequence's recurrent-state slot (hybrid models)
  int64_t num_tokens = 0;
};

// Everything an architecture needs to build itself.
struct BuildContext {
  const ModelConfig* config = nullptr;
  LinearContext linear;    // checkpoint, quantization config, device, host queue
  vt::DType act_dtype = vt::DType::kBF16;  // activations: BF16 or F32
  vt::DType kv_dtype = vt::DType::kBF16;   // the KV cache: act_dtype, or F8E4M3 (--kv-cache-dtype fp8)
  LoadProgress* progress = nullptr;  // advanced by each module's checkpoint bytes; may be null
  // Tensor parallelism: this rank's place in the group and its communicator (null when
  // tp.size is 1). Architectures that cannot be split refuse tp.size > 1.
  TensorParallel tp;
  vt::Communicator* comm = nullptr;
};

// A decoder-only causal LM on one device.
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  // Runs one step. ids: [T] I32 on the device; meta: the batch's attention inputs;
  // logit_rows: [R] I32 rows of the T tokens whose logits are wanted, or undefined for all T
  // rows in order; logits: [R, vocab] F32 on the device.
  virtual void Forward(const vt::Queue& q, const vt::Tensor& ids, const AttentionMetadata& meta,
                       const KvCacheTensors& cache, const vt::Tensor& logit_rows, const vt::Tensor& logits) = 0;
  // Bytes of weights one step reads (every weight once).
  virtual int64_t weight_bytes() const = 0;
  virtual KvCacheSpec CacheSpec(int64_t num_blocks, int64_t block_size, vt::Device device) const = 0;
  // The recurrent layers' state of `num_slots` slots (num_layers 0: the model has none).
  virtual StateSpec StateCacheSpec(int64_t num_slots) const {
    (void)num_slots;
    return {};
  }
};

using ArchitectureFactory = std::unique_ptr<CausalLM> (*)(const BuildContext& ctx);
// Every op the architecture's Forward dispatches for this quantization and activation dtype.
using ArchitectureOps = std::vector<vt::OpId> (*)(const QuantConfig& quant, vt::DType act);

struct Architecture {
  std::string_view name;  // HF class name, e.g. "Qwen3ForCausalLM"
  ArchitectureFactory create;
  ArchitectureOps required_ops;
};

// The architectures this build supports (an explicit table; no static registration).
std::span<const Architecture> Architectures();
// The entry for `name`; throws vt::Error listing the supported ones when there is none.
const Architecture& FindArchitecture(std::string_view name);

}  // namespace vtllm::model
