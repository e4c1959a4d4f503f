#include "model/layers/rotary.h"

#include <cmath>

#include "vt/error.h"

namespace vtllm::model {

std::vector<float> RopeInverseFrequencies(const RopeParams& p) {
  VT_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0, "rope: head_dim must be even and > 0, got ", p.head_dim);
  VT_CHECK(std::isfinite(p.theta) && p.theta > 0, "rope: rope_theta must be > 0, got ", p.theta);
  const int64_t half = p.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = static_cast<float>(p.theta);
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(p.head_dim);
    inv[i] = 1.0f / std::pow(base, e);
  }
  if (p.scaling_type == "default" || p.scaling_type.empty()) return inv;
  VT_CHECK(p.scaling_type == "llama3", "rope: rope scaling type \"", p.scaling_type,
           "\" is not supported yet (supported: default, llama3)");
  VT_CHECK(p.factor > 0 && p.original_max_position_embeddings > 0 && p.high_freq_factor != p.low_freq_factor,
           "rope: llama3 scaling needs factor > 0, original_max_position_embeddings > 0 and distinct "
           "low/high_freq_factor (got factor ",
           p.factor, ", original_max_position_embeddings ", p.original_max_position_embeddings, ", low ",
           p.low_freq_factor, ", high ", p.high_freq_factor, ")");
  // HF's _compute_llama3_parameters, in f32 tensor arithmetic with Python-float constants.
  const float old_ctx = static_cast<float>(p.original_max_position_embeddings);
  const float factor = static_cast<float>(p.factor);
  const float low = static_cast<float>(p.low_freq_factor), high = static_cast<float>(p.high_freq_factor);
  const float low_wavelen = static_cast<float>(p.original_max_position_embeddings / p.low_freq_factor);
  const float high_wavelen = static_cast<float>(p.original_max_position_embeddings / p.high_freq_factor);
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2.0 * M_PI) / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
  return inv;
}

vt::Tensor BuildRopeCache(const RopeParams& params, int64_t max_positions, vt::Device device) {
  VT_CHECK(max_positions > 0, "rope: max_position_embeddings must be > 0, got ", max_positions);
  const std::vector<float> inv = RopeInverseFrequencies(params);
  const int64_t D = params.head_dim, half = D / 2;
  std::vector<float> cache(static_cast<size_t>(max_positions * D));
  for (int64_t pos = 0; pos < max_positions; ++pos) {
    float* row = &cache[static_cast<size_t>(pos * D)];
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(static_cast<float>(pos) * inv[i]);
      row[i] = static_cast<float>(std::cos(angle));
      row[half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return vt::Tensor::FromHost(cache.data(), {max_positions, D}, vt::DType::kF32, device);
}

}  // namespace vtllm::model
