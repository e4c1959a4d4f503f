// Tensor parallelism simulated in one process: a model split over 2 (and 4, where the
// fixture's heads allow) ranks, each a thread with its own shard over the in-process
// communicator, against the same model unsplit. With F32 activations the only difference is
// the order of the sums the row-parallel layers split (o_proj, down_proj and each expert's
// down projection add the ranks' partial products), so the logits agree to a few f32
// roundings; greedy tokens agree.
// Each case also checks that the sharded path ran: the collectives counted per step and each
// rank's KV cache holding its share of the KV heads.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "loader_test_util.h"
#include "model/models/decoder_parts.h"
#include "model_oracle.h"

namespace vtllm::model {
namespace {

namespace fs = std::filesystem;

struct TpCase {
  const char* name;
  std::string dir;
  std::vector<int> sizes;  // tensor-parallel sizes the fixture's heads allow
};

void PrintTo(const TpCase& c, std::ostream* os) { *os << c.name; }

std::string Fixture(const std::string& rel) { return std::string(VTLLM_FIXTURES_DIR) + "/" + rel; }

std::vector<TpCase> Cases() {
  return {
      {"qwen3", Fixture("oracles/qwen3-tiny/bf16"), {2, 4}},              // 4 q / 2 KV heads: 4 replicates
      {"llama", Fixture("models/llama-tiny"), {2, 4}},                    // 4 q / 2 KV heads, untied head
      {"qwen2_bias", Fixture("models/qwen2-tiny"), {2}},                  // q/k/v biases, tied head, 6 q heads
      {"qwen3_mqa", Fixture("models/qwen3-mqa-tiny"), {2, 4}},            // one KV head, replicated
      {"llama_ct_fp8", Fixture("models/llama-ct-fp8"), {2, 4}},           // compressed-tensors static FP8
      {"qwen3_modelopt_fp8", Fixture("oracles/qwen3-tiny/fp8_modelopt"), {2, 4}},  // ModelOpt static FP8
      // Mixture of experts: every rank keeps all experts, a block of each one's intermediate size.
      {"qwen3_moe", Fixture("models/qwen3-moe-tiny"), {2, 4}},                 // 8 experts of 48, 2 dense layers
      {"qwen2_moe_shared", Fixture("models/qwen2-moe-tiny"), {2, 4}},          // shared expert, sigmoid gate
      {"qwen3_moe_modelopt_fp8", Fixture("models/qwen3-moe-tiny-fp8"), {2, 4}},  // static FP8 experts
  };
}

LoadOptions Options(vt::DType dtype, int tp) {
  LoadOptions o = testing::CpuOptions(dtype);
  o.cpu_threads = 1;
  o.tensor_parallel_size = tp;
  return o;
}

// Prompts of the fixture's vocabulary: a few lengths, crossing a 16-token block.
std::vector<std::vector<int32_t>> Prompts(int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int len : {1, 7, 21}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((i * 37 + len * 11 + 3) % vocab));
    out.push_back(p);
  }
  return out;
}

class TensorParallelTest : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelTest, F32LogitsAndGreedyTokensEqualUnsplitModel) {
  const TpCase& c = GetParam();
  auto whole = Model::Load(c.dir, Options(vt::DType::kF32, 1));
  ASSERT_EQ(whole->tensor_parallel_size(), 1);
  ASSERT_EQ(whole->communicator(), nullptr);
  const auto prompts = Prompts(whole->vocab_size());
  for (int n : c.sizes) {
    SCOPED_TRACE(c.name + std::string(" tp=") + std::to_string(n));
    auto split = Model::Load(c.dir, Options(vt::DType::kF32, n));
    ASSERT_EQ(split->tensor_parallel_size(), n);
    // Each rank's KV cache holds its share of the KV heads (one head each when replicated).
    const int64_t Hk = whole->config().num_key_value_heads;
    const int64_t local_kv = Hk % n == 0 ? Hk / n : 1;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(split->rank(r).KvCacheBytesPerBlock(16) * Hk, whole->KvCacheBytesPerBlock(16) * local_kv) << r;
      EXPECT_LT(split->rank(r).weight_bytes(), whole->weight_bytes()) << r;
      ASSERT_NE(split->rank(r).communicator(), nullptr);
      EXPECT_EQ(split->rank(r).communicator()->rank(), r);
    }
    double worst = 0, scale = 0;
    for (const auto& prompt : prompts) {
      const int64_t before = split->communicator()->num_collectives();
      const std::vector<float> a = testing::PromptLogits(*whole, prompt);
      const std::vector<float> b = testing::PromptLogits(*split, prompt);
      // Per step: an all-reduce of the embeddings and after each layer's o_proj and MLP (down_proj
      // or the MoE block, its shared expert included), one logits all-gather.
      EXPECT_EQ(split->communicator()->num_collectives() - before, 2 * whole->config().num_hidden_layers + 2);
      const testing::LogitError e = testing::CompareLogits(b, a);
      worst = std::max(worst, e.max_abs);
      scale = std::max(scale, e.ref_max_abs);
      EXPECT_EQ(testing::GreedyTokens(*split, prompt, 8), testing::GreedyTokens(*whole, prompt, 8));
    }
    std::printf("  %s tp=%d f32: max |logit diff| %.3g (max |logit| %.3g)\n", c.name, n, worst, scale);
    // Only the summation order differs (measured at most ~1e-6 relative); 1e-5 of the logits' scale.
    EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0));
  }
}

TEST_P(TensorParallelTest, Bf16GreedyTokensEqualUnsplitModelUpToNearTie) {
  // BF16 activations: each rank's partial sum of o_proj / down_proj is rounded to BF16 before
  // the all-reduce (as vLLM's BF16 all-reduce is), so logits differ by BF16 roundings, and
  // the random tiny fixtures have near-ties: greedy tokens must agree up to the first step
  // whose margin (unsplit model) is below 0.25, and at least the first token.
  const TpCase& c = GetParam();
  auto whole = Model::Load(c.dir, Options(vt::DType::kBF16, 1));
  for (int size : c.sizes) {
    SCOPED_TRACE(c.name + std::string(" tp=") + std::to_string(size));
    auto split = Model::Load(c.dir, Options(vt::DType::kBF16, size));
    size_t compared = 0;
    for (const auto& prompt : Prompts(whole->vocab_size())) {
      std::vector<double> margins;
      const std::vector<int32_t> want = testing::GreedyTokens(*whole, prompt, 12, &margins);
      const std::vector<int32_t> got = testing::GreedyTokens(*split, prompt, 12);
      const size_t n = std::max<size_t>(1, testing::StepsBeforeNearTie(margins, 0.25));
      compared += n;
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << "step " << i << " of prompt " << prompt.size();
    }
    std::printf("  %s tp=%d bf16: %zu greedy steps compared before near-ties\n", c.name, size, compared);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TensorParallel, BatchedStepsEqualUnsplitModel) {
  // Several sequences in one step (ForwardBatch), the split model against the whole one.
  const std::string dir = Fixture("oracles/qwen3-tiny/bf16");
  auto whole = Model::Load(dir, Options(vt::DType::kF32, 1));
  auto split = Model::Load(dir, Options(vt::DType::kF32, 2));
  KvCache ca = whole->MakeKvCache(256), cb = split->MakeKvCache(256);
  ASSERT_EQ(cb.tensors().peer_shards().size(), 1u);
  SequenceKv a1, a2, b1, b2;
  const std::vector<int32_t> ids = {5, 9, 100, 7, 3, 77, 1};
  const BatchEntry ea[] = {{&a1, 3}, {&a2, 4}}, eb[] = {{&b1, 3}, {&b2, 4}};
  const std::vector<float> la = whole->ForwardBatch(ca, ids, ea), lb = split->ForwardBatch(cb, ids, eb);
  EXPECT_LE(testing::MaxAbsDiff(la, lb), 1e-4);
  const std::vector<int32_t> next = {11, 12};
  const BatchEntry da[] = {{&a1, 1}, {&a2, 1}}, db[] = {{&b1, 1}, {&b2, 1}};
  EXPECT_LE(testing::MaxAbsDiff(whole->ForwardBatch(ca, next, da), split->ForwardBatch(cb, next, db)), 1e-4);
}

TEST(TensorParallel, PaddedDecodeStepsEqualUnsplitModel) {
  // Decode steps in the form a CUDA graph replays (padded to the batch bucket; run eagerly
  // here): the padded step's token ids go through the vocabulary-parallel mapping too.
  const std::string dir = Fixture("models/llama-tiny");
  auto whole = Model::Load(dir, Options(vt::DType::kF32, 1));
  auto split = Model::Load(dir, Options(vt::DType::kF32, 2));
  whole->set_padded_eager_steps(true);
  split->set_padded_eager_steps(true);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  EXPECT_EQ(testing::GreedyTokens(*split, prompt, 6), testing::GreedyTokens(*whole, prompt, 6));
  EXPECT_GT(split->graph_stats().padded_eager, 0);
  EXPECT_GT(split->rank(1).graph_stats().padded_eager, 0);
}

TEST(TensorParallel, VocabShardIdsPointOutsideIdsAtTheZeroRow) {
  std::vector<int32_t> ids = {0, 99, 100, 150, 199, 200, 399};
  VocabShardIds(ids, 400, TensorParallel{1, 4});  // rank 1 of 4: rows [100, 200)
  EXPECT_EQ(ids, (std::vector<int32_t>{100, 100, 0, 50, 99, 100, 100}));
}

TEST(TensorParallel, OneRankIsTheUnsplitPath) {
  // --tensor-parallel-size 1 is the default path: no group, no collectives, same logits bit
  // for bit.
  const std::string dir = Fixture("models/llama-tiny");
  LoadOptions o = Options(vt::DType::kBF16, 1);
  auto a = Model::Load(dir, o);
  auto b = Model::Load(dir, testing::CpuOptions(vt::DType::kBF16));
  EXPECT_EQ(a->communicator(), nullptr);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  EXPECT_EQ(testing::PromptLogits(*a, prompt), testing::PromptLogits(*b, prompt));
}

// A copy of a fixture's config.json (and quantization config) with `edit` applied, in a
// temporary directory: the split checks run before any weight is read.
std::string EditedConfig(const std::string& src, const std::string& name,
                         const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() / ("vtllm_tp_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ifstream f(src + "/config.json");
  nlohmann::json j = nlohmann::json::parse(f);
  edit(j);
  testing::WriteJson((dir / "config.json").string(), j);
  return dir.string();
}

TEST(TensorParallel, SplitsThatDoNotDivideAreLoadErrors) {
  const std::string qwen3 = Fixture("oracles/qwen3-tiny/bf16"), qwen2 = Fixture("models/qwen2-tiny");
  testing::ExpectLoadError([&] { Model::Load(qwen3, Options(vt::DType::kF32, 3)); },
                           {"config.json", "--tensor-parallel-size 3", "num_attention_heads 4"});
  // 6 query heads split in 3, but 2 KV heads neither split in 3 nor replicated on 3.
  testing::ExpectLoadError([&] { Model::Load(qwen2, Options(vt::DType::kF32, 3)); },
                           {"--tensor-parallel-size 3", "num_key_value_heads 2"});
  // 6 ranks: heads fine (KV heads replicated), the intermediate size 224 is not.
  testing::ExpectLoadError([&] { Model::Load(qwen2, Options(vt::DType::kF32, 6)); },
                           {"--tensor-parallel-size 6", "intermediate_size 224"});
  const std::string odd_vocab = EditedConfig(qwen3, "vocab", [](nlohmann::json& j) { j["vocab_size"] = 513; });
  testing::ExpectLoadError([&] { Model::Load(odd_vocab, Options(vt::DType::kF32, 2)); },
                           {"--tensor-parallel-size 2", "vocab_size 513", "pad"});
  fs::remove_all(odd_vocab);
  // Mixture of experts: each expert's intermediate size, and the shared expert's, is split.
  const std::string odd_moe = EditedConfig(Fixture("models/qwen3-moe-tiny"), "moe",
                                           [](nlohmann::json& j) { j["moe_intermediate_size"] = 50; });
  testing::ExpectLoadError([&] { Model::Load(odd_moe, Options(vt::DType::kF32, 4)); },
                           {"--tensor-parallel-size 4", "moe_intermediate_size 50"});
  fs::remove_all(odd_moe);
  const std::string odd_shared = EditedConfig(Fixture("models/qwen2-moe-tiny"), "shared",
                                              [](nlohmann::json& j) { j["shared_expert_intermediate_size"] = 98; });
  testing::ExpectLoadError([&] { Model::Load(odd_shared, Options(vt::DType::kF32, 4)); },
                           {"--tensor-parallel-size 4", "shared_expert_intermediate_size 98"});
  fs::remove_all(odd_shared);
}

TEST(TensorParallel, ModelsThatCannotBeSplitAreRefused) {
  testing::ExpectLoadError([&] { Model::Load(Fixture("models/qwen3-next-tiny"), Options(vt::DType::kF32, 2)); },
                           {"Qwen3NextForCausalLM", "cannot be split"});
  // A hybrid model with experts: its Gated DeltaNet layers are not split yet.
  testing::ExpectLoadError([&] { Model::Load(Fixture("models/qwen3_5-moe-tiny"), Options(vt::DType::kF32, 2)); },
                           {"Qwen3_5MoeForCausalLM", "cannot be split"});
  testing::ExpectLoadError(
      [&] { Model::Load(Fixture("models/qwen3-fp8-block-tiny"), Options(vt::DType::kF32, 2)); },
      {"--tensor-parallel-size 2", "static per-tensor FP8"});
  LoadOptions online = Options(vt::DType::kF32, 2);  // --quantization fp8 of a BF16 MoE checkpoint
  online.quantization = "fp8";
  testing::ExpectLoadError([&] { Model::Load(Fixture("models/qwen3-moe-tiny"), online); },
                           {"--tensor-parallel-size 2", "online FP8"});
}

TEST(TensorParallel, MoreRanksThanCudaDevicesIsAnError) {
  // Asking for more CUDA devices than are present says how many there are (none in a CPU
  // build or on a machine without a GPU; on a GPU machine ask for one more than it has).
  const int have = vt::CudaDeviceCount(), want = std::max(2, have + 1);
  LoadOptions o = Options(vt::DType::kBF16, want);
  o.device = vt::Device{vt::DeviceType::kCUDA, 0};
  const std::string dir = Fixture("models/llama-tiny");
  try {
    Model::Load(dir, o);
    ADD_FAILURE() << "expected an error";
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("needs " + std::to_string(want) + " CUDA devices"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace vtllm::model
