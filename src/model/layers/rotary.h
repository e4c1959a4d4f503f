// The cos/sin cache of rotary position embedding, built once per model on the host and
// moved to the device: [max_positions, head_dim] F32, row p = [cos(p*f_i) | sin(p*f_i)],
// i < head_dim/2 (vt::RotaryEmbedding's layout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vt/tensor.h"

namespace vtllm::model {

struct RopeParams {
  int64_t head_dim = 0;
  double theta = 10000.0;
  std::string scaling_type = "default";  // "default" or "llama3"
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

// The inverse frequencies f_i, i < head_dim/2, as Hugging Face computes them in f32:
// 1 / theta^(2i/head_dim), then llama3 scaling (long wavelengths divided by `factor`,
// a smooth blend between low_freq and high_freq wavelengths). Throws vt::Error naming an
// unsupported scaling type.
std::vector<float> RopeInverseFrequencies(const RopeParams& params);

// The cache for positions [0, max_positions): the angle p*f_i is formed in f32 (as HF does),
// its cos and sin are evaluated in double and rounded to f32.
vt::Tensor BuildRopeCache(const RopeParams& params, int64_t max_positions, vt::Device device);

}  // namespace vtllm::model
