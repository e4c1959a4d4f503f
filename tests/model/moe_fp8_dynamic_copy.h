// Copies of a BF16 MoE fixture (qwen3-moe-tiny) in the dynamic FP8 formats of the routed
// experts' group-scaled op: block FP8 (`quant_method: fp8`, weight_scale_inv per [bn, bk]
// block) or compressed-tensors per-channel weights with per-token activations (weight_scale
// [N, 1]); every `*proj.weight` quantized (the routed experts' too), the routers and lm_head
// kept. Shared by tests/model/moe_fp8_dynamic_test.cpp and the CUDA model tests.
#pragma once

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_edit.h"
#include "fp8_block_quantize.h"
#include "fp8_reference_forward.h"
#include "loader_test_util.h"

namespace vtllm::model::testing {

// Block [bn, bk], or per-channel when bn is 0.
struct MoeFp8Format {
  int64_t bn = 0, bk = 0;
  bool block() const { return bn > 0; }
  std::string Name() const {
    return block() ? "block [" + std::to_string(bn) + ", " + std::to_string(bk) + "]" : std::string("channel/token");
  }
};

inline bool QuantizedMoeTensor(const std::string& name) {
  return name.find("proj.weight") != std::string::npos && name.size() > 7 &&
         name.compare(name.size() - 7, 7, ".weight") == 0;
}

// Edits applied to one scale tensor while writing the copy.
struct ScaleEdit {
  std::string name;        // the scale tensor to change
  int rows = 0;            // rows more (or fewer)
  bool drop = false;       // not written
  float value = 1.0f;      // != 1: element 0 set to it (0, NaN)
};

// A copy of qwen3-moe-tiny in format f: per block (or row) s = f32(amax / 448) (1 for zeros),
// codes e4m3(w / s). Scales F32, or BF16 (then the codes are made with the BF16 scale).
inline std::string QuantizedMoeCopy(const std::string& src, const TempDir& tmp, const MoeFp8Format& f,
                                    const ScaleEdit& edit = {}, bool bf16_scales = false) {
  const std::string dir = tmp.Sub("q");
  EditedCopy(src, dir, [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                     std::vector<std::vector<char>>& keep) {
    if (!QuantizedMoeTensor(n)) return w.Add(n, t);
    const int64_t N = t.dim(0), K = t.dim(1);
    const int64_t bn = f.block() ? f.bn : 1, bk = f.block() ? f.bk : K;
    const int64_t nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
    keep.emplace_back(static_cast<size_t>(N * K));
    uint8_t* q = reinterpret_cast<uint8_t*>(keep.back().data());
    std::vector<float> s(static_cast<size_t>(nb * kb), 1.0f);
    QuantizeBf16Blocks(t, bn, bk, bf16_scales, q, s.data());
    const std::string base = n.substr(0, n.size() - 7);
    const std::string sname = base + (f.block() ? ".weight_scale_inv" : ".weight_scale");
    w.Add(n, vt::DType::kF8E4M3, t.shape(), q);
    int64_t rows = nb;
    if (sname == edit.name) {
      if (edit.drop) return;
      rows += edit.rows;
      s.resize(static_cast<size_t>(rows * kb), 1.0f);
      if (edit.value != 1.0f) s[0] = edit.value;
    }
    if (bf16_scales) {
      keep.emplace_back(s.size() * 2);
      auto* b = reinterpret_cast<uint16_t*>(keep.back().data());
      for (size_t i = 0; i < s.size(); ++i) b[i] = vt::FloatToBf16(s[i]);
      w.Add(sname, vt::DType::kBF16, {rows, kb}, b);
    } else {
      keep.emplace_back(s.size() * sizeof(float));
      std::memcpy(keep.back().data(), s.data(), s.size() * sizeof(float));
      w.Add(sname, vt::DType::kF32, {rows, kb}, keep.back().data());
    }
  });
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["quantization_config"] =
      testing::DynamicFp8QuantConfig(f.bn, f.bk, {"lm_head"},
                                     {"lm_head", "re:.*mlp\\.gate$"});
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

}  // namespace vtllm::model::testing
