// The fixture checkpoints on CUDA against the same checkpoints on the CPU backend: prompt
// logits within a stated tolerance, greedy continuations token for token (a disagreement
// is only allowed at a step where the CPU's own top-1/top-2 margin is a near-tie, and the
// comparison ends there since the sequences then differ), and a batched step over several
// sequences. Without a GPU every test is SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/loader_test_util.h"
#include "model/model.h"
#include "model/quantized_fixture.h"
#include "model/moe_fp8_dynamic_copy.h"
#include "vt/cuda/kernels.h"  // KvCacheFp8Launches
#include "vt/vt.h"

namespace vtllm::model {
namespace {

#define REQUIRE_CUDA()                                                                  \
  do {                                                                                  \
    if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped"; \
  } while (0)

std::string FixturesDir() { return testing::FixturesRoot(); }

// The prompts of an oracle's reference.json (token ids written by the Hugging Face run).
std::vector<std::vector<int32_t>> Prompts(const std::string& reference_json) {
  std::ifstream f(reference_json);
  EXPECT_TRUE(f.good()) << "cannot open " << reference_json;
  if (!f.good()) return {};
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : j.at("cases")) out.push_back(c.at("prompt").get<std::vector<int32_t>>());
  return out;
}

// Checkpoint directories: the qwen3-tiny oracles, and every model under fixtures/models.
std::vector<std::string> Checkpoints() {
  const std::string root = FixturesDir();
  std::vector<std::string> dirs = {root + "/oracles/qwen3-tiny/bf16", root + "/oracles/qwen3-tiny/fp8_modelopt"};
  const std::filesystem::path models = root + "/models";
  std::error_code ec;
  if (std::filesystem::is_directory(models, ec)) {
    std::vector<std::string> extra;
    for (const auto& e : std::filesystem::directory_iterator(models, ec))
      if (std::filesystem::exists(e.path() / "config.json")) extra.push_back(e.path().string());
    std::sort(extra.begin(), extra.end());
    dirs.insert(dirs.end(), extra.begin(), extra.end());
  }
  return dirs;
}

std::unique_ptr<Model> LoadOn(const std::string& dir, vt::Device device, vt::DType dtype,
                              const std::string& kv_cache_dtype = "auto") {
  LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  o.kv_cache_dtype = kv_cache_dtype;
  o.cpu_threads = 2;
  o.progress = false;
  return Model::Load(dir, o);
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<double> margins;  // top-1 minus top-2 logit at each step
  std::vector<float> first_logits;
};

Greedy RunGreedy(Model& model, const std::vector<int32_t>& prompt, int steps) {
  const int64_t V = model.vocab_size();
  KvCache cache = model.MakeKvCache(static_cast<int64_t>(prompt.size()) + steps + 1, 16);
  SequenceKv seq;
  std::vector<int64_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  Greedy g;
  std::vector<float> logits = model.Forward(prompt, pos, {&cache, &seq});
  g.first_logits = logits;
  for (int i = 0; i < steps; ++i) {
    std::vector<float> row(logits.end() - V, logits.end());
    const auto top = std::max_element(row.begin(), row.end());
    const int32_t tok = static_cast<int32_t>(top - row.begin());
    const float best = *top;
    *top = -INFINITY;
    g.tokens.push_back(tok);
    g.margins.push_back(static_cast<double>(best) - *std::max_element(row.begin(), row.end()));
    if (i + 1 == steps) break;
    const int64_t p = seq.num_tokens;
    logits = model.Forward(std::vector<int32_t>{tok}, std::vector<int64_t>{p}, {&cache, &seq});
  }
  return g;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << "logit " << i << " is " << a[i];
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// Tolerances of CUDA vs CPU logits. F32 activations: both backends run f32 arithmetic in
// different summation orders (cuBLASLt, attention tiles), ~1e-6 relative per op over 3
// layers: 2e-3. BF16 activations: a value near a BF16 rounding boundary may round to
// neighbouring BF16 values on the two backends (2^-8 relative), which then propagates:
// 0.1, as the BF16 oracle tests allow vs float32. A near-tie is a CPU margin below the
// logit tolerance times two (either backend may then pick either token).
struct Tol {
  double logits, near_tie;
};
Tol TolFor(vt::DType act) { return act == vt::DType::kF32 ? Tol{2e-3, 4e-3} : Tol{0.1, 0.2}; }

std::string Name(vt::DType d) { return std::string(vt::DTypeName(d)); }

// Fixtures whose BF16 greedy continuations the logit margin cannot vouch for: the random
// qwen3-next-tiny's router has a top-k gap of 9e-6 (gdn_oracle.py prints it), so a one-ulp
// BF16 difference between backends can pick another expert and move a later step's logits
// by more than any margin (transformers' own bf16 run departs from its f32 run by up to 5.2
// logits there). Their BF16 greedy agreement is printed, not asserted; their f32 runs and
// the BF16 prompt logits are asserted as for every fixture.
bool Bf16GreedyUndecidable(const std::string& dir, vt::DType act) {
  return act == vt::DType::kBF16 && dir.find("qwen3-next-tiny") != std::string::npos;
}

// The Hugging Face-made static-FP8 hybrid fixtures whose BF16 logits the backends cannot be
// held to: quantizing an activation with a static scale turns a one-ulp BF16 difference
// into another FP8 code, and these two move far on a code flip (gdn_moe_oracle.py measures
// it: inputs x (1 + 2^-21) move 23 of qwen3-next-tiny-fp8's 189 positions above 1e-4 and 55
// of qwen3_5-moe-tiny-fp8's above 1e-2, where another expert is picked; a BF16 ulp is 2^-8).
// On an H100 their BF16 CUDA logits were 0.12 (Next, a batched step) and 0.24-1.35
// (Qwen3.5-MoE) from the CPU's. Their BF16 runs here are printed, not asserted; their F32
// runs are asserted as every fixture's, CUDA against the HF emulation at every position is
// fp8_hybrid_cuda_test.cpp's, and BF16 CUDA against the CPU on vtllm-quantized copies of
// the same models StaticFp8HybridBf16MatchesCpu's.
bool Bf16LogitsFlipBound(const std::string& dir, vt::DType act) {
  const std::string name = dir.substr(dir.find_last_of('/') + 1);
  return act == vt::DType::kBF16 && (name == "qwen3-next-tiny-fp8" || name == "qwen3_5-moe-tiny-fp8");
}

// For each prompt (ids folded into the model's vocabulary): the CUDA model's logits after
// the prompt within tol.logits of the CPU model's, and its greedy tokens equal the CPU's up
// to a step where the CPU's top-1/top-2 margin is a near-tie (see Bf16GreedyUndecidable).
void ExpectGreedyMatchesCpu(Model& cpu, Model& gpu, const std::string& dir, vt::DType act,
                            const std::vector<std::vector<int32_t>>& prompts, int steps, const Tol& tol) {
  const std::string name = dir.substr(dir.find_last_of('/') + 1);
  for (size_t c = 0; c < prompts.size(); ++c) {
    std::vector<int32_t> prompt = prompts[c];
    for (auto& id : prompt) id = static_cast<int32_t>(id % cpu.vocab_size());  // prompts of another vocab
    const Greedy want = RunGreedy(cpu, prompt, steps);
    const Greedy got = RunGreedy(gpu, prompt, steps);
    const double err = MaxAbsDiff(got.first_logits, want.first_logits);
    size_t agree = 0;
    while (agree < got.tokens.size() && got.tokens[agree] == want.tokens[agree]) ++agree;
    std::printf("[%s %s] case %zu (T=%zu): max |logit cuda - cpu| = %.3g; greedy agrees on %zu of %d\n", name.c_str(),
                Name(act).c_str(), c, prompt.size(), err, agree, steps);
    if (Bf16LogitsFlipBound(dir, act)) continue;
    EXPECT_LE(err, tol.logits) << dir << " " << Name(act) << " case " << c;
    if (agree < got.tokens.size() && !Bf16GreedyUndecidable(dir, act)) {
      EXPECT_LT(want.margins[agree], tol.near_tie)
          << dir << " " << Name(act) << " case " << c << ": step " << agree << " cuda " << got.tokens[agree] << " cpu "
          << want.tokens[agree] << " with a CPU margin of " << want.margins[agree];
    }
  }
}

// TolFor, widened for checkpoints with dynamic activation scales (block and per-token FP8)
// in BF16: a BF16 activation one ulp apart between the backends (GEMM or attention summation
// order) moves its group's amax, so the scale and every fp8 code of the group; measured 0.17
// on a 64-token prompt with equal greedy tokens.
Tol TolForCheckpoint(const std::string& dir, vt::DType act) {
  Tol tol = TolFor(act);
  const bool dynamic_fp8 = dir.find("qwen3-fp8-block") != std::string::npos ||
                           dir.find("qwen3-fp8-dynamic") != std::string::npos;
  if (dynamic_fp8 && act == vt::DType::kBF16) tol.logits = 0.3;
  return tol;
}

TEST(ModelCuda, GreedyTokensMatchCpu) {
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  constexpr int kSteps = 24;
  for (const std::string& dir : Checkpoints()) {
    for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
      auto cpu = LoadOn(dir, vt::Device::Cpu(), act);
      // A static-FP8 BF16 model runs the attention as PagedAttentionQuantFp8.
      const auto attention_runs = [] {
        return vt::DispatchCount(vt::OpId::kPagedAttention, vt::DeviceType::kCUDA) +
               vt::DispatchCount(vt::OpId::kPagedAttentionQuantFp8, vt::DeviceType::kCUDA);
      };
      const int64_t before = attention_runs();
      auto gpu = LoadOn(dir, vt::Device::Cuda(0), act);
      const Tol tol = TolForCheckpoint(dir, act);
      ExpectGreedyMatchesCpu(*cpu, *gpu, dir, act, prompts, kSteps, tol);
      EXPECT_GT(attention_runs(), before) << "the CUDA model did not run the CUDA attention kernel";
    }
  }
}

// `--quantization fp8` with `act` activations, on the CPU (set .device for CUDA).
LoadOptions OnlineFp8Options(vt::DType act) {
  LoadOptions o;
  o.dtype = act;
  o.cpu_threads = 2;
  o.progress = false;
  o.quantization = "fp8";
  return o;
}

// Online FP8 (--quantization fp8) of a BF16 fixture: the weights are quantized on the host
// for both backends (the same bytes), the activations per token on each; logits within the
// dynamic formats' tolerance, and the CUDA group-scaled GEMM ran.
TEST(ModelCuda, OnlineFp8MatchesCpu) {
  REQUIRE_CUDA();
  const std::string dir = FixturesDir() + "/models/qwen3-mqa-tiny";
  const auto prompts = Prompts(dir + "/reference.json");
  ASSERT_FALSE(prompts.empty());
  for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
    LoadOptions o = OnlineFp8Options(act);
    auto cpu = Model::Load(dir, o);
    o.device = vt::Device::Cuda(0);
    const int64_t before = vt::DispatchCount(vt::OpId::kMatmulFp8GroupScaled, vt::DeviceType::kCUDA);
    auto gpu = Model::Load(dir, o);
    ASSERT_EQ(gpu->quant().method, QuantMethod::kFp8Online);
    Tol tol = TolFor(act);
    if (act == vt::DType::kBF16) tol.logits = 0.3;  // as the other dynamic formats (GreedyTokensMatchCpu)
    for (size_t c = 0; c < prompts.size(); ++c) {
      const Greedy want = RunGreedy(*cpu, prompts[c], 8), got = RunGreedy(*gpu, prompts[c], 8);
      const double err = MaxAbsDiff(got.first_logits, want.first_logits);
      std::printf("[online fp8 %s] case %zu: max |logit cuda - cpu| = %.3g\n", Name(act).c_str(), c, err);
      EXPECT_LE(err, tol.logits) << Name(act) << " case " << c;
    }
    EXPECT_GT(vt::DispatchCount(vt::OpId::kMatmulFp8GroupScaled, vt::DeviceType::kCUDA), before);
  }
}

// Online FP8 of the BF16 MoE fixture: the experts' weights are quantized on the host for
// both backends (the same bytes, one scale per expert and projection), the activations per
// token on each, and each (token, slot) pair's SwiGLU output per pair (MoeExpertsFp8PerToken).
// Prompt logits within the dynamic formats' tolerance, greedy tokens equal up to a CPU
// near-tie, and the CUDA per-token expert kernel ran.
TEST(ModelCuda, OnlineFp8MoeMatchesCpu) {
  REQUIRE_CUDA();
  const std::string dir = FixturesDir() + "/models/qwen3-moe-tiny";
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
    LoadOptions o = OnlineFp8Options(act);
    auto cpu = Model::Load(dir, o);
    o.device = vt::Device::Cuda(0);
    auto gpu = Model::Load(dir, o);
    ASSERT_EQ(gpu->quant().method, QuantMethod::kFp8Online);
    const int64_t before = vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCUDA);
    Tol tol = TolFor(act);
    if (act == vt::DType::kBF16) tol.logits = 0.3;  // as the other dynamic formats (GreedyTokensMatchCpu)
    ExpectGreedyMatchesCpu(*cpu, *gpu, dir, act, prompts, 12, tol);
    EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCUDA), before)
        << "no CUDA per-token expert kernel ran";
  }
}

// Block FP8 ([32, 32]: moe_intermediate_size 48 ends partway through a block, so each
// expert's gate and up keep their own scale rows) and per-channel FP8 of the MoE fixture, every
// projection and routed expert quantized: the same bytes on both backends, the activations
// quantized per token (and group) on each; prompt logits within the dynamic formats'
// tolerance, greedy tokens equal up to a CPU near-tie, and the CUDA group-scaled expert kernel
// ran (its dispatch and its launch counter).
TEST(ModelCuda, BlockAndChannelFp8MoeMatchesCpu) {
  REQUIRE_CUDA();
  const std::string src = FixturesDir() + "/models/qwen3-moe-tiny";
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  for (const testing::MoeFp8Format& f : {testing::MoeFp8Format{32, 32}, testing::MoeFp8Format{}}) {
    testing::TempDir tmp;
    const std::string dir = testing::QuantizedMoeCopy(src, tmp, f);
    for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
      LoadOptions o{.device = vt::Device::Cpu(), .dtype = act, .cpu_threads = 2, .progress = false};
      auto cpu = Model::Load(dir, o);
      o.device = vt::Device::Cuda(0);
      auto gpu = Model::Load(dir, o);
      const int64_t before = vt::DispatchCount(vt::OpId::kMoeExpertsFp8GroupScaled, vt::DeviceType::kCUDA);
      const int64_t launches = vt::cuda::MoeGroupScaledLaunches();
      Tol tol = TolFor(act);
      if (act == vt::DType::kBF16) tol.logits = 0.3;  // as the other dynamic formats
      ExpectGreedyMatchesCpu(*cpu, *gpu, dir, act, prompts, 12, tol);
      EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeExpertsFp8GroupScaled, vt::DeviceType::kCUDA), before) << f.Name();
      EXPECT_GT(vt::cuda::MoeGroupScaledLaunches(), launches) << f.Name();
    }
  }
}

// The MoE fixtures (qwen3-moe-tiny: 8 experts, top-2, layers 0 and 2 dense; -fp8: its static
// FP8 experts; qwen2-moe-tiny: a sigmoid-gated shared expert beside the routed ones) on CUDA
// against the CPU, named so that a missing fixture fails rather than
// drops out of Checkpoints(): prompt logits within TolFor, greedy tokens equal up to a CPU
// near-tie (a near-tie in the router's top-k can also flip an expert; the logit check would
// show it), and the dispatch counts prove the CUDA MoE kernels (src/vt/cuda/moe.cu) ran.
TEST(ModelCuda, MoeFixturesMatchCpu) {
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  constexpr int kSteps = 12;
  for (const auto& [name, fp8] : {std::pair{"qwen3-moe-tiny", false}, std::pair{"qwen3-moe-tiny-fp8", true},
                                  std::pair{"qwen2-moe-tiny", false}}) {
    const std::string dir = FixturesDir() + "/models/" + name;
    const bool shared = std::string(name) == "qwen2-moe-tiny";
    const vt::OpId experts = fp8 ? vt::OpId::kMoeExpertsFp8 : vt::OpId::kMoeExperts;
    for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
      auto cpu = LoadOn(dir, vt::Device::Cpu(), act);
      auto gpu = LoadOn(dir, vt::Device::Cuda(0), act);
      const int64_t routed = vt::DispatchCount(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA);
      const int64_t ran = vt::DispatchCount(experts, vt::DeviceType::kCUDA);
      const int64_t gated = vt::DispatchCount(vt::OpId::kSigmoidGatedAdd, vt::DeviceType::kCUDA);
      const Tol tol = TolFor(act);
      ExpectGreedyMatchesCpu(*cpu, *gpu, dir, act, prompts, kSteps, tol);
      EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA), routed) << dir;
      EXPECT_GT(vt::DispatchCount(experts, vt::DeviceType::kCUDA), ran) << dir << ": no CUDA expert kernel ran";
      if (shared) {
        EXPECT_GT(vt::DispatchCount(vt::OpId::kSigmoidGatedAdd, vt::DeviceType::kCUDA), gated) << dir;
      }
    }
  }
}

// The hybrid Gated DeltaNet fixtures (qwen3-next-tiny: fused GDN projections, gated attention,
// MoE with a gated shared expert; qwen3_5-tiny: split projections, dense MLP; qwen3_5-moe-tiny:
// split projections, every layer MoE with a gated shared expert) on CUDA
// against the CPU, named so that a missing fixture fails: prompt logits within TolFor, greedy
// tokens equal up to a CPU near-tie, and the dispatch counts prove the CUDA GDN kernels
// (src/vt/cuda/gdn.cu), the zero-centred norm and the experts ran.
TEST(ModelCuda, HybridFixturesMatchCpu) {
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  constexpr int kSteps = 12;
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"}) {
    const std::string dir = FixturesDir() + "/models/" + name;
    const bool moe = std::string(name) == "qwen3_5-moe-tiny";
    for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
      auto cpu = LoadOn(dir, vt::Device::Cpu(), act);
      auto gpu = LoadOn(dir, vt::Device::Cuda(0), act);
      const int64_t rule = vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA);
      const int64_t conv = vt::DispatchCount(vt::OpId::kCausalConv1d, vt::DeviceType::kCUDA);
      const int64_t norm = vt::DispatchCount(vt::OpId::kRmsNormZeroCentred, vt::DeviceType::kCUDA);
      const int64_t experts = vt::DispatchCount(vt::OpId::kMoeExperts, vt::DeviceType::kCUDA);
      const Tol tol = TolFor(act);
      ExpectGreedyMatchesCpu(*cpu, *gpu, dir, act, prompts, kSteps, tol);
      EXPECT_GT(vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA), rule) << dir;
      EXPECT_GT(vt::DispatchCount(vt::OpId::kCausalConv1d, vt::DeviceType::kCUDA), conv) << dir;
      EXPECT_GT(vt::DispatchCount(vt::OpId::kRmsNormZeroCentred, vt::DeviceType::kCUDA), norm) << dir;
      if (moe) {
        EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeExperts, vt::DeviceType::kCUDA), experts) << dir;
      }
    }
  }
}

// Static FP8 of the three hybrid fixtures, as `vtllm quantize` writes them in both formats
// (ModelOpt, compressed-tensors; every GDN projection and, in qwen3_5-moe-tiny, every expert),
// with BF16 activations, where the fused recipes run: CUDA against the CPU as above, and the
// dispatch counts prove the CUDA fused recipes ran (the zero-centred norms' and the GDN
// layers' gated norm + FP8 ahead of out_proj).
TEST(ModelCuda, StaticFp8HybridBf16MatchesCpu) {
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  constexpr int kSteps = 8;
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"})
    for (const char* format : {"modelopt", "compressed-tensors"}) {
      SCOPED_TRACE(std::string(name) + " " + format);
      testing::TempDir tmp;
      const std::string dir = tmp / name;
      testing::QuantizeStaticFp8(FixturesDir() + "/models/" + name, dir, format);
      auto cpu = LoadOn(dir, vt::Device::Cpu(), vt::DType::kBF16);
      auto gpu = LoadOn(dir, vt::Device::Cuda(0), vt::DType::kBF16);
      ASSERT_EQ(gpu->quant().method, QuantMethod::kFp8Static);
      const int64_t gated = vt::DispatchCount(vt::OpId::kRmsNormGatedQuantFp8, vt::DeviceType::kCUDA);
      const int64_t zc = vt::DispatchCount(vt::OpId::kRmsNormZeroCentredQuantFp8, vt::DeviceType::kCUDA);
      ExpectGreedyMatchesCpu(*cpu, *gpu, dir, vt::DType::kBF16, prompts, kSteps, TolFor(vt::DType::kBF16));
      EXPECT_GT(vt::DispatchCount(vt::OpId::kRmsNormGatedQuantFp8, vt::DeviceType::kCUDA), gated);
      EXPECT_GT(vt::DispatchCount(vt::OpId::kRmsNormZeroCentredQuantFp8, vt::DeviceType::kCUDA), zc);
    }
}

TEST(ModelCuda, BatchedStepsMatchCpu) {
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_FALSE(prompts.empty());
  for (const std::string& dir : Checkpoints()) {
    const vt::DType act = vt::DType::kBF16;
    auto cpu = LoadOn(dir, vt::Device::Cpu(), act);
    auto gpu = LoadOn(dir, vt::Device::Cuda(0), act);
    const int64_t V = cpu->vocab_size();
    int64_t total = 0;
    std::vector<int32_t> ids;
    for (const auto& p : prompts) {
      total += (static_cast<int64_t>(p.size()) + 4 + 15) / 16 * 16;  // whole blocks of 16 per sequence
      for (int32_t id : p) ids.push_back(static_cast<int32_t>(id % V));
    }
    KvCache cache_cpu = cpu->MakeKvCache(total, 16), cache_gpu = gpu->MakeKvCache(total, 16);
    std::vector<SequenceKv> seq_cpu(prompts.size()), seq_gpu(prompts.size());
    std::vector<BatchEntry> b_cpu, b_gpu;
    for (size_t i = 0; i < prompts.size(); ++i) {
      b_cpu.push_back({&seq_cpu[i], static_cast<int64_t>(prompts[i].size())});
      b_gpu.push_back({&seq_gpu[i], static_cast<int64_t>(prompts[i].size())});
    }
    // A batched prefill of every prompt, then batched decode steps of the CPU's tokens.
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> want = cpu->ForwardBatch(cache_cpu, ids, b_cpu);
      const std::vector<float> got = gpu->ForwardBatch(cache_gpu, ids, b_gpu);
      const double err = MaxAbsDiff(got, want);
      std::printf("[%s batch] step %d: %zu sequences, max |logit cuda - cpu| = %.3g\n",
                  dir.substr(dir.find_last_of('/') + 1).c_str(), step, prompts.size(), err);
      if (!Bf16LogitsFlipBound(dir, act)) {
        EXPECT_LE(err, TolForCheckpoint(dir, act).logits) << dir << " step " << step;
      }
      ids.clear();
      for (size_t i = 0; i < prompts.size(); ++i) {
        ids.push_back(static_cast<int32_t>(std::max_element(want.begin() + static_cast<int64_t>(i) * V,
                                                            want.begin() + static_cast<int64_t>(i + 1) * V) -
                                           (want.begin() + static_cast<int64_t>(i) * V)));
        b_cpu[i].num_new = b_gpu[i].num_new = 1;
      }
    }
  }
}

// Decode steps as CUDA graph replays (dense and MoE checkpoints): a step of 4 sequences (bucket 4, no padding) gives the
// eager step's logits bit for bit, and so does every later replay; a step of 3 (padded to
// bucket 4, the same recorded graph) gives the same tokens as its eager run and logits
// within the BF16 tolerance (the GEMMs then run M = 4, where cuBLASLt may choose another
// algorithm than for M = 3). The counts prove which path ran.
TEST(ModelCuda, Fp8KvCacheMatchesCpu) {
  // --kv-cache-dtype fp8 on both backends: the cache bytes are one quantizer's, but the keys
  // fed to it may differ by a BF16 ulp (then by one e4m3 code); the BF16 tolerance covers it.
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  for (const std::string& dir : {FixturesDir() + "/oracles/qwen3-tiny/bf16", FixturesDir() + "/models/qwen3_5-tiny"}) {
    auto cpu = LoadOn(dir, vt::Device::Cpu(), vt::DType::kBF16, "fp8");
    auto gpu = LoadOn(dir, vt::Device::Cuda(0), vt::DType::kBF16, "fp8");
    ASSERT_EQ(gpu->kv_cache_dtype(), vt::DType::kF8E4M3);
    const vt::cuda::KvFp8Launches before = vt::cuda::KvCacheFp8Launches();
    ExpectGreedyMatchesCpu(*cpu, *gpu, dir, vt::DType::kBF16, prompts, 8, TolFor(vt::DType::kBF16));
    const vt::cuda::KvFp8Launches after = vt::cuda::KvCacheFp8Launches();
    EXPECT_GT(after.attention, before.attention) << dir;
    EXPECT_GT(after.qk_norm_rope, before.qk_norm_rope) << dir;
  }
}

TEST(ModelCuda, GraphReplayEqualsEagerStep) {
  REQUIRE_CUDA();
  const auto prompts = Prompts(FixturesDir() + "/oracles/qwen3-tiny/reference.json");
  ASSERT_GE(prompts.size(), 4u);
  // The F8E4M3 KV cache too: its scales are kernel arguments captured by value, fixed at load.
  const std::pair<std::string, std::string> runs[] = {{FixturesDir() + "/oracles/qwen3-tiny/bf16", "auto"},
                                                      {FixturesDir() + "/oracles/qwen3-tiny/fp8_modelopt", "auto"},
                                                      {FixturesDir() + "/models/qwen3-moe-tiny", "auto"},
                                                      {FixturesDir() + "/models/qwen3-moe-tiny-fp8", "auto"},
                                                      {FixturesDir() + "/models/qwen2-moe-tiny", "auto"},
                                                      {FixturesDir() + "/oracles/qwen3-tiny/bf16", "fp8"},
                                                      {FixturesDir() + "/oracles/qwen3-tiny/fp8_modelopt", "fp8"},
                                                      // Head size 64: the tensor-core decode attention,
                                                      // over a BF16 and an F8E4M3 cache.
                                                      {FixturesDir() + "/models/qwen3-fp8-block-tiny", "auto"},
                                                      {FixturesDir() + "/models/qwen3-fp8-block-tiny", "fp8"}};
  for (const auto& [dir, kv] : runs) {
    // An F8E4M3 cache's steps take a decode kernel from 8 sequences; these steps have 3-4.
    struct DecodeAlways {
      explicit DecodeAlways(bool on) {
        if (on) setenv("VT_CUDA_ATTN_DECODE", "always", 1);
      }
      ~DecodeAlways() { unsetenv("VT_CUDA_ATTN_DECODE"); }
    } decode_always(kv == "fp8");
    auto m = LoadOn(dir, vt::Device::Cuda(0), vt::DType::kBF16, kv);
    ASSERT_TRUE(m->step_graphs()) << "graphs are on by default on CUDA";
    const int64_t V = m->vocab_size();
    KvCache cache = m->MakeKvCache(1024, 16);
    std::vector<SequenceKv> seqs(4);
    std::vector<int32_t> ids;
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < 4; ++i) {
      for (int32_t id : prompts[i]) ids.push_back(static_cast<int32_t>(id % V));
      batch.push_back({&seqs[i], static_cast<int64_t>(prompts[i].size())});
    }
    m->ForwardBatch(cache, ids, batch);  // the prefill: eager (several tokens per sequence)
    EXPECT_EQ(m->graph_stats().replays, 0);
    for (const size_t S : {size_t{4}, size_t{3}}) {
      std::vector<BatchEntry> step;
      std::vector<int32_t> next;
      for (size_t i = 0; i < S; ++i) {
        step.push_back({&seqs[i], 1});
        next.push_back(static_cast<int32_t>((7 * i + 3) % static_cast<size_t>(V)));
      }
      const std::vector<SequenceKv> before = seqs;
      // The same step three times over the same cache state (each rewrites its token's slot).
      auto run = [&](bool graphs) {
        m->set_step_graphs(graphs);
        std::vector<float> out = m->ForwardBatch(cache, next, step);
        for (size_t i = 0; i < S; ++i) seqs[i].num_tokens = before[i].num_tokens;
        return out;
      };
      const Model::GraphStats s0 = m->graph_stats();
      // The eager step with the tensor-core decode attention (head size 64 or 128) reading its
      // context before the kernel's wait (after the prelude that wrote the cache) and without:
      // the same bytes.
      const int64_t early0 = vt::cuda::DecodeMmaLaunchesReadingEarly(), fp80 = vt::cuda::DecodeMmaFp8Launches();
      const int64_t wide0 = vt::cuda::DecodeMmaWideLaunches();
      const std::vector<float> eager = run(false);
      const int64_t early1 = vt::cuda::DecodeMmaLaunchesReadingEarly();
      if (dir.ends_with("qwen3-fp8-block-tiny")) {
        EXPECT_GT(early1, early0) << dir << " S=" << S;
        EXPECT_EQ(vt::cuda::DecodeMmaFp8Launches() > fp80, kv == "fp8") << dir << " S=" << S;
        // A few sequences (at most 4 x 2 KV heads: a GPU of at least 32 SMs), over either
        // cache, take the decode kernel's wide form (the runs below compare it with itself,
        // reading early and not) unless a switch says otherwise.
        const char* heads_n = std::getenv("VT_CUDA_ATTN_DECODE_HEADS_N");
        const char* wide = std::getenv("VT_CUDA_ATTN_DECODE_WIDE");
        const bool switched = (heads_n != nullptr && std::string(heads_n) != "0") || (wide != nullptr && std::string(wide) == "0");
        if (!switched) {
          EXPECT_GT(vt::cuda::DecodeMmaWideLaunches(), wide0) << dir << " S=" << S;
        }
      }
      setenv("VT_CUDA_ATTN_EARLY_READS", "0", 1);
      const std::vector<float> waited = run(false);
      unsetenv("VT_CUDA_ATTN_EARLY_READS");
      EXPECT_EQ(vt::cuda::DecodeMmaLaunchesReadingEarly(), early1) << dir << " S=" << S;
      EXPECT_EQ(std::memcmp(waited.data(), eager.data(), eager.size() * sizeof(float)), 0)
          << dir << " S=" << S << ": reading the context before the wait changed the logits";
      const std::vector<float> first = run(true);
      const std::vector<float> again = run(true);
      const Model::GraphStats s1 = m->graph_stats();
      EXPECT_EQ(s1.eager - s0.eager, 2) << dir << " S=" << S;
      EXPECT_EQ(s1.replays - s0.replays, 2) << dir << " S=" << S;
      // S = 4 records bucket 4; S = 3 replays that same graph, padded.
      EXPECT_EQ(s1.captures - s0.captures, S == 4 ? 1 : 0) << dir << " S=" << S;
      ASSERT_EQ(first.size(), S * static_cast<size_t>(V));
      EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
          << dir << " S=" << S << ": two replays of one step differ";
      if (S == 4) {
        EXPECT_EQ(std::memcmp(first.data(), eager.data(), first.size() * sizeof(float)), 0)
            << dir << ": the replay differs from the eager step";
      } else {
        const double err = MaxAbsDiff(first, eager);
        std::printf("[%s graph] S=3 padded to 4: max |logit replay - eager| = %.3g\n",
                    dir.substr(dir.find_last_of('/') + 1).c_str(), err);
        EXPECT_LE(err, TolFor(vt::DType::kBF16).logits) << dir;
        for (size_t i = 0; i < S; ++i) {
          auto row = [&](const std::vector<float>& v) { return v.begin() + static_cast<std::ptrdiff_t>(i * V); };
          std::vector<float> e(row(eager), row(eager) + V);
          const auto top = std::max_element(e.begin(), e.end());
          const float best = *top;
          const int64_t want = top - e.begin();
          *top = -INFINITY;
          if (best - *std::max_element(e.begin(), e.end()) < TolFor(vt::DType::kBF16).near_tie) continue;
          EXPECT_EQ(std::max_element(row(first), row(first) + V) - row(first), want) << dir << " row " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vtllm::model
