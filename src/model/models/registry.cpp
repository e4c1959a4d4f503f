// The architecture table.
#include <array>

#include "model/config.h"
#include "model/models/causal_lm.h"
#include "model/models/decoder.h"
#include "model/models/hybrid.h"
#include "vt/error.h"

namespace vtllm::model {

namespace {

// Qwen3: per-head q/k RMSNorm; q/k/v bias only if attention_bias.
std::unique_ptr<CausalLM> CreateQwen3(const BuildContext& ctx) {
  return MakeDecoder(ctx, {.qk_norm = true, .qkv_bias = ctx.config->attention_bias});
}
// Qwen2: q/k/v always carry a bias (HF's Qwen2Attention hard-codes it).
std::unique_ptr<CausalLM> CreateQwen2(const BuildContext& ctx) {
  return MakeDecoder(ctx, {.qk_norm = false, .qkv_bias = true});
}
// Llama: plain; attention_bias adds q/k/v biases.
std::unique_ptr<CausalLM> CreateLlama(const BuildContext& ctx) {
  return MakeDecoder(ctx, {.qk_norm = false, .qkv_bias = ctx.config->attention_bias});
}

constexpr std::array<Architecture, 10> kArchitectures = {{
    {"Qwen3ForCausalLM", &CreateQwen3, &DecoderOps},
    // Qwen3 attention; the layers the config makes sparse have a SparseMoeBlock.
    {"Qwen3MoeForCausalLM", &CreateQwen3, &MoeDecoderOps},
    // Qwen2 attention (q/k/v biases); sparse layers add the gated shared expert.
    {"Qwen2MoeForCausalLM", &CreateQwen2, &MoeDecoderOps},
    {"Qwen2ForCausalLM", &CreateQwen2, &DecoderOps},
    {"LlamaForCausalLM", &CreateLlama, &DecoderOps},
    // Hybrid Gated DeltaNet / gated full attention; Qwen3-Next's layers are sparse (MoE with
    // a shared expert), Qwen3.5's dense, Qwen3.5-MoE's all sparse with a shared expert. The
    // multimodal wrappers run their text model only.
    {"Qwen3NextForCausalLM", &MakeHybridDecoder, &HybridDecoderOps},
    {"Qwen3_5ForCausalLM", &MakeHybridDecoder, &HybridDecoderOps},
    {"Qwen3_5ForConditionalGeneration", &MakeHybridDecoder, &HybridDecoderOps},
    {"Qwen3_5MoeForCausalLM", &MakeHybridDecoder, &HybridDecoderOps},
    {"Qwen3_5MoeForConditionalGeneration", &MakeHybridDecoder, &HybridDecoderOps},
}};

}  // namespace

std::span<const Architecture> Architectures() { return kArchitectures; }

const Architecture& FindArchitecture(std::string_view name) {
  for (const Architecture& a : kArchitectures)
    if (a.name == name) return a;
  std::string known;
  for (const Architecture& a : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw vt::Error(vt::StrCat("architecture \"", name, "\" is not supported yet (supported: ", known, ")"));
}

}  // namespace vtllm::model
