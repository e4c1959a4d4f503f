// Model::Load and Forward: the up-front op check, argument errors, and the paged KV cache
// giving the same logits whether a prompt runs at once, in chunks, or batched with others.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <functional>
#include <numeric>

#include "model/model.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

const std::string kLlama = std::string(VTLLM_FIXTURES_DIR) + "/models/llama-tiny";
const std::string kQwen3 = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-mqa-tiny";

LoadOptions F32() {
  return {.device = vt::Device::Cpu(), .dtype = vt::DType::kF32, .cpu_threads = 2, .progress = false};
}

std::vector<int64_t> Iota(int64_t from, size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

TEST(ModelRunner, ChunkedPrefillAndDecodeMatchOneShot) {
  auto model = Model::Load(kQwen3, F32());
  const std::vector<int32_t> prompt = {5, 9, 200, 31, 7, 7, 100, 3, 44, 12, 250, 1, 0, 17, 18, 19, 20, 21};
  const int64_t V = model->vocab_size();
  KvCache cache = model->MakeKvCache(64, 4);  // small blocks: the prompt spans 5 of them
  SequenceKv one;
  const std::vector<float> all = model->Forward(prompt, Iota(0, prompt.size()), {&cache, &one}, true);
  // The same prompt as 7 + 1 + 10 tokens in another sequence of the same cache.
  SequenceKv chunks;
  std::vector<float> got;
  size_t at = 0;
  for (size_t n : {7u, 1u, 10u}) {
    std::vector<int32_t> part(prompt.begin() + at, prompt.begin() + at + n);
    std::vector<float> l = model->Forward(part, Iota(static_cast<int64_t>(at), n), {&cache, &chunks}, true);
    got.insert(got.end(), l.begin(), l.end());
    at += n;
  }
  // Only the attention's summation blocks differ between the two: f32 rounding.
  EXPECT_LT(MaxDiff(got, all), 1e-4);
  EXPECT_EQ(one.num_tokens, 18);
  EXPECT_EQ(chunks.num_tokens, 18);
  EXPECT_EQ(static_cast<int64_t>(all.size()), 18 * V);
}

TEST(ModelRunner, BatchedSequencesMatchSeparateRuns) {
  auto model = Model::Load(kLlama, F32());
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> p1 = {3, 1, 4, 1, 5, 9, 2, 6}, p2 = {27, 18, 28};
  KvCache cache = model->MakeKvCache(64, 4);
  SequenceKv s1, s2, r1, r2;
  const std::vector<float> want1 = model->Forward(p1, Iota(0, p1.size()), {&cache, &r1});
  const std::vector<float> want2 = model->Forward(p2, Iota(0, p2.size()), {&cache, &r2});
  std::vector<int32_t> ids = p1;
  ids.insert(ids.end(), p2.begin(), p2.end());
  const BatchEntry batch[] = {{&s1, 8}, {&s2, 3}};
  std::vector<float> got = model->ForwardBatch(cache, ids, batch);
  ASSERT_EQ(static_cast<int64_t>(got.size()), 2 * V);
  EXPECT_LT(MaxDiff(std::vector<float>(got.begin(), got.begin() + V), want1), 1e-5);
  EXPECT_LT(MaxDiff(std::vector<float>(got.begin() + V, got.end()), want2), 1e-5);
  // A decode step of both, against single decode steps.
  const std::vector<int32_t> next = {11, 12};
  const BatchEntry step[] = {{&s1, 1}, {&s2, 1}};
  got = model->ForwardBatch(cache, next, step);
  const std::vector<float> d1 = model->Forward(std::vector<int32_t>{11}, std::vector<int64_t>{8}, {&cache, &r1});
  const std::vector<float> d2 = model->Forward(std::vector<int32_t>{12}, std::vector<int64_t>{3}, {&cache, &r2});
  EXPECT_LT(MaxDiff(std::vector<float>(got.begin(), got.begin() + V), d1), 1e-5);
  EXPECT_LT(MaxDiff(std::vector<float>(got.begin() + V, got.end()), d2), 1e-5);
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const vt::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ModelRunner, BadForwardArgumentsAreErrors) {
  auto model = Model::Load(kLlama, F32());
  KvCache cache = model->MakeKvCache(16, 4);
  SequenceKv seq;
  EXPECT_NE(ErrorOf([&] {
              model->Forward(std::vector<int32_t>{1, 2}, std::vector<int64_t>{0, 2}, {&cache, &seq});
            }).find("positions[1] = 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              model->Forward(std::vector<int32_t>{448}, std::vector<int64_t>{0}, {&cache, &seq});
            }).find("token id 448 is outside the vocabulary of 448"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              model->Forward(std::vector<int32_t>(17, 1), Iota(0, 17), {&cache, &seq});
            }).find("free"),
            std::string::npos);
  EXPECT_EQ(seq.num_tokens, 0);  // nothing ran
}

TEST(ModelRunner, LoadListsEveryOpMissingOnTheDevice) {
  if (!vt::OpRegistered(vt::OpId::kPagedAttention, vt::DeviceType::kCUDA)) {
    // A build without CUDA kernels: loading on CUDA must name every missing op at once.
    const std::string msg = ErrorOf([&] { Model::Load(kLlama, vt::Device::Cuda(0)); });
    EXPECT_NE(msg.find("no kernel for cuda"), std::string::npos) << msg;
    for (const char* op : {"PagedAttention", "QkNormRopeCacheWrite", "Embedding", "RmsNorm"})
      EXPECT_NE(msg.find(op), std::string::npos) << op << " missing from: " << msg;
    return;
  }
  // A CUDA build registers every model op there: nothing is missing on either device.
  const std::vector<vt::OpId> ops = {vt::OpId::kEmbedding, vt::OpId::kQkNormRopeCacheWrite,
                                     vt::OpId::kPagedAttention, vt::OpId::kRmsNorm, vt::OpId::kMatmul,
                                     vt::OpId::kMatmulFp8, vt::OpId::kQuantFp8Static, vt::OpId::kSiluMul};
  EXPECT_TRUE(MissingOps(ops, vt::DeviceType::kCUDA).empty());
  EXPECT_TRUE(MissingOps(ops, vt::DeviceType::kCPU).empty());
}

TEST(ModelRunner, AnActivationTheMlpDoesNotImplementIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("vtllm-gelu-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kLlama)) fs::copy_file(e.path(), dir / e.path().filename());
  std::ifstream in(dir / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  in.close();
  cfg["hidden_act"] = "gelu";
  std::ofstream(dir / "config.json") << cfg.dump();
  const std::string msg = ErrorOf([&] { Model::Load(dir.string(), F32()); });
  EXPECT_NE(msg.find("hidden_act \"gelu\" is not implemented"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(ModelRunner, UnknownArchitectureNamesTheSupportedOnes) {
  EXPECT_THROW(FindArchitecture("GPT2LMHeadModel"), vt::Error);
  const std::string msg = ErrorOf([] { FindArchitecture("GPT2LMHeadModel"); });
  EXPECT_NE(msg.find("Qwen3ForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LlamaForCausalLM"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vtllm::model
