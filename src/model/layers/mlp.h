// The SiLU-gated MLP of a decoder layer: x [T, H] -> gate/up (one merged linear) [T, 2I]
// -> silu(gate) * up [T, I] (quantized to FP8 in the same pass when down takes FP8 input and
// activations are BF16) -> down -> out [T, H].
#pragma once

#include <string>

#include "model/layers/activation_buffers.h"
#include "model/layers/linear.h"

namespace vtllm::model {

class GatedMlp {
 public:
  GatedMlp() = default;
  // Loads `prefix`{gate,up,down}_proj, e.g. prefix "model.layers.3.mlp.". With tensor
  // parallelism this rank keeps its block of the intermediate size (intermediate / tp.size
  // rows of gate and up, the same columns of down, which is then row-parallel: `out` of
  // Forward is this rank's part of the sum the caller all-reduces).
  static GatedMlp Load(const LinearContext& lc, const std::string& prefix, int64_t hidden, int64_t intermediate,
                       const TensorParallel& tp = {});

  // x: the normed input (F8E4M3 when gate_up() takes quantized input, or quantized per token
  // group as gate_up().input_group_quant() says); out: [T, H].
  // fuse_quant: activations are BF16, so silu-mul and the FP8 quantization of down's input
  // run as one fused recipe (static: SiluMulQuantFp8; per token group:
  // SiluMulQuantFp8PerTokenGroup, where the device has it).
  void Forward(const vt::Queue& q, const LinearInput& x, const vt::Tensor& out, bool fuse_quant,
               ActivationBuffers& buffers) const;

  const Linear& gate_up() const { return gate_up_; }
  const Linear& down() const { return down_; }
  int64_t weight_bytes() const { return gate_up_.weight_bytes() + down_.weight_bytes(); }

 private:
  int64_t intermediate_ = 0;
  Linear gate_up_, down_;
};

}  // namespace vtllm::model
