// Copies of a fixture checkpoint with one tensor changed, for the tests of how loading and
// `vtllm quantize` refuse malformed weights: written through SafetensorsWriter (the writer
// has its own tests), beside the source's config files.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/safetensors_writer.h"
#include "vt/dtype.h"

namespace vtllm::model::testing {

// Called once per tensor of the source: writes it into w unchanged, changed, or not at all.
// Bytes of a replacement live in `keep` until the file is written.
using TensorEdit = std::function<void(const std::string& name, const vt::Tensor& t, SafetensorsWriter& w,
                                      std::vector<std::vector<char>>& keep)>;

// `src`'s config.json and generation_config.json and its tensors through `edit`, in `dir`
// (which must exist). Returns dir.
inline std::string EditedCopy(const std::string& src, const std::string& dir, const TensorEdit& edit) {
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(src + "/" + f, dir + "/" + f);
  const Checkpoint ck = Checkpoint::Open(src);
  SafetensorsWriter w;
  std::vector<std::vector<char>> keep;
  for (const std::string& n : ck.names()) edit(n, ck.Get(n), w, keep);
  w.Write(dir + "/model.safetensors");
  return dir;
}

// A copy whose BF16 tensor `name` has element `index` set to the BF16 bits `bits`.
inline std::string CopyWithBf16Element(const std::string& src, const std::string& dir, const std::string& name,
                                       int64_t index, uint16_t bits) {
  return EditedCopy(src, dir, [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                  std::vector<std::vector<char>>& keep) {
    if (n != name) return w.Add(n, t);
    keep.emplace_back(static_cast<const char*>(t.data()), static_cast<const char*>(t.data()) + t.nbytes());
    std::memcpy(keep.back().data() + 2 * index, &bits, 2);
    w.Add(n, vt::DType::kBF16, t.shape(), keep.back().data());
  });
}

// A copy whose BF16 tensor `name` is stored widened to F32.
inline std::string CopyWithF32Tensor(const std::string& src, const std::string& dir, const std::string& name) {
  return EditedCopy(src, dir, [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                  std::vector<std::vector<char>>& keep) {
    if (n != name) return w.Add(n, t);
    keep.emplace_back(static_cast<size_t>(t.numel()) * sizeof(float));
    auto* wide = reinterpret_cast<float*>(keep.back().data());
    for (int64_t i = 0; i < t.numel(); ++i) wide[i] = vt::Bf16ToFloat(t.data_as<uint16_t>()[i]);
    w.Add(n, vt::DType::kF32, t.shape(), wide);
  });
}

// A copy of the per-expert BF16 MoE checkpoint `src` with each sparse layer's experts stored
// fused (transformers 5: experts.gate_up_proj [E, 2I, H], each expert's gate rows then its up
// rows, and experts.down_proj [E, H, I]): the same experts in the other layout. Returns dir.
inline std::string CopyWithFusedExperts(const std::string& src, const std::string& dir) {
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(src + "/" + f, dir + "/" + f);
  const Checkpoint ck = Checkpoint::Open(src);
  const ModelConfig cfg = ModelConfig::FromDir(src);
  const int64_t E = cfg.num_experts, H = cfg.hidden_size, I = cfg.moe_intermediate_size;
  SafetensorsWriter w;
  std::vector<std::vector<uint16_t>> keep;  // the fused tensors' bytes until Write
  for (const std::string& n : ck.names())
    if (n.find(".experts.") == std::string::npos) w.Add(n, ck.Get(n));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    if (!cfg.IsSparseLayer(l)) continue;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    std::vector<uint16_t> gu, dn;
    for (int64_t e = 0; e < E; ++e)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const vt::Tensor t = ck.Get(p + std::to_string(e) + "." + proj + ".weight");
        std::vector<uint16_t>& dst = proj[0] == 'd' ? dn : gu;
        dst.insert(dst.end(), t.data_as<uint16_t>(), t.data_as<uint16_t>() + t.numel());
      }
    keep.push_back(std::move(gu));
    w.Add(p + "gate_up_proj", vt::DType::kBF16, {E, 2 * I, H}, keep.back().data());
    keep.push_back(std::move(dn));
    w.Add(p + "down_proj", vt::DType::kBF16, {E, H, I}, keep.back().data());
  }
  w.Write(dir + "/model.safetensors");
  return dir;
}

// Calibration windows of the given lengths: token ids from a fixed LCG over the vocabulary
// (not the oracles' prompts).
inline std::vector<std::vector<int32_t>> CalibrationWindows(int64_t vocab, uint64_t seed,
                                                            const std::vector<int>& lengths) {
  std::vector<std::vector<int32_t>> w;
  uint64_t s = seed;
  for (int len : lengths) {
    std::vector<int32_t> ids;
    for (int i = 0; i < len; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab)));
    }
    w.push_back(ids);
  }
  return w;
}

// The quantization_config of a dynamic FP8 checkpoint: block FP8 (`quant_method: fp8`,
// blocks [bn, bk], `not_converted` kept unquantized) when bn > 0, else compressed-tensors
// per-channel weights with dynamic per-token activations (`ignore` kept unquantized).
inline nlohmann::json DynamicFp8QuantConfig(int64_t bn, int64_t bk, const std::vector<std::string>& not_converted,
                                            const std::vector<std::string>& ignore) {
  if (bn > 0)
    return {{"quant_method", "fp8"},
            {"activation_scheme", "dynamic"},
            {"fmt", "e4m3"},
            {"weight_block_size", {bn, bk}},
            {"modules_to_not_convert", not_converted}};
  const nlohmann::json fp8 = {{"type", "float"}, {"num_bits", 8}, {"symmetric", true}};
  nlohmann::json wq = fp8, aq = fp8;
  wq["strategy"] = "channel";
  wq["dynamic"] = false;
  aq["strategy"] = "token";
  aq["dynamic"] = true;
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", wq}, {"input_activations", aq}}}}},
          {"ignore", ignore}};
}

}  // namespace vtllm::model::testing
