// Copies of the BF16 hybrid fixtures (qwen3-next-tiny, qwen3_5-tiny, qwen3_5-moe-tiny) in the
// dynamic FP8 formats: block FP8 of any [bn, bk] or per-channel weights with per-token
// activations. Shared by dynamic_fp8_hybrid_test.cpp and fused_group_quant_test.cpp.
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_edit.h"
#include "fp8_block_quantize.h"
#include "fp8_reference_forward.h"
#include "loader_test_util.h"

namespace vtllm::model::testing {

// Block [bn, bk], or per-channel when bn is 0. release: the FP8 releases' choice of modules
// (Qwen3-Next-80B-A3B-Instruct-FP8, the Qwen3.5 FP8 releases): the routed experts quantized
// too, in_proj_ba (Qwen3.5: in_proj_b and in_proj_a) kept BF16.
struct Format {
  int64_t bn = 0, bk = 0;
  bool release = false;
  bool block() const { return bn > 0; }
};

// The projections quantized: decoder linears. Unless f.release, the routed experts stay
// unquantized (the MoeFp8Dynamic tests cover block and per-channel experts); the routers, the
// shared expert's gate and lm_head always do.
inline bool Quantized(const std::string& name, const Format& f) {
  if (!(name.find("proj") != std::string::npos && name.size() > 7 &&
        name.compare(name.size() - 7, 7, ".weight") == 0))
    return false;
  if (!f.release) return name.find(".experts.") == std::string::npos;
  for (const char* kept : {".in_proj_ba.", ".in_proj_b.", ".in_proj_a."})
    if (name.find(kept) != std::string::npos) return false;
  return true;
}

// A copy of `src` in format f: per block (or row) s = f32(amax / 448) (1 for zeros), codes
// e4m3(f32(w / s)). bad_rows: each scale tensor written with that many rows more (or fewer).
inline std::string QuantizedCopy(const std::string& src, const TempDir& tmp, const Format& f, int bad_rows = 0) {
  const std::string dir = tmp.Sub("q");
  EditedCopy(src, dir, [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                    std::vector<std::vector<char>>& keep) {
    if (!Quantized(n, f)) return w.Add(n, t);
    const int64_t N = t.dim(0), K = t.dim(1);
    const int64_t bn = f.block() ? f.bn : 1, bk = f.block() ? f.bk : K;
    const int64_t nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
    keep.emplace_back(static_cast<size_t>(N * K));
    uint8_t* q = reinterpret_cast<uint8_t*>(keep.back().data());
    const int64_t alloc = std::max(nb, nb + bad_rows) * kb;
    keep.emplace_back(static_cast<size_t>(alloc) * sizeof(float), 0);
    float* s = reinterpret_cast<float*>(keep.back().data());
    for (int64_t i = 0; i < alloc; ++i) s[i] = 1.0f;
    QuantizeBf16Blocks(t, bn, bk, /*bf16_scales=*/false, q, s);
    const std::string base = n.substr(0, n.size() - 7);
    w.Add(n, vt::DType::kF8E4M3, t.shape(), q);
    w.Add(base + (f.block() ? ".weight_scale_inv" : ".weight_scale"), vt::DType::kF32, {nb + bad_rows, kb}, s);
  });
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["quantization_config"] =
      f.release ? DynamicFp8QuantConfig(
                      f.bn, f.bk, {"lm_head", "mlp.gate", "shared_expert_gate", "in_proj_ba", "in_proj_b", "in_proj_a"},
                      {"lm_head", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$", "re:.*in_proj_(ba|b|a)$"})
                : DynamicFp8QuantConfig(
                      f.bn, f.bk, {"lm_head", "mlp.experts", "shared_expert_gate"},
                      {"lm_head", "re:.*mlp\\.experts\\..*", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$"});
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

}  // namespace vtllm::model::testing
