// Structured outputs end to end: a tiny random Qwen3 (tests/fixtures/oracles/qwen3-tiny, its
// 512 ids read with the real Qwen3 tokenizer) sampling at temperature 1 under a schema must
// produce JSON that parses and validates, with several seeds, several requests in a batch, and
// through preemption (recompute keeps each request's grammar in step with its tokens).
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "model/model_oracle.h"
#include "structured_output_test.h"

namespace vtllm::engine {
namespace {

using so_test::Json;

const std::string kTiny = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/bf16";

std::shared_ptr<model::Model> TinyModel() {
  static std::shared_ptr<model::Model> m = model::Model::Load(kTiny, model::testing::CpuOptions(vt::DType::kF32));
  return m;
}

EngineConfig Config(int64_t kv_bytes = 0) {
  EngineConfig c;
  c.model_dir = kTiny;
  c.max_model_len = 256;
  c.max_num_seqs = 8;
  c.kv_cache_memory_bytes = kv_bytes;
  c.use_generation_config = false;
  c.load.progress = false;
  return c;
}

EngineRequest Constrained(const std::string& id, const std::string& schema, uint64_t seed, int64_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = {9, 100, 27, 301, 45, 7, 88, 12};
  r.params.temperature = 1.0;
  r.params.seed = seed;
  r.params.max_tokens = max_tokens;
  if (schema == "json_object") {
    r.params.structured.kind = StructuredOutputParams::Kind::kJsonObject;
  } else {
    r.params.structured.kind = StructuredOutputParams::Kind::kJsonSchema;
    r.params.structured.json_schema = schema;
  }
  return r;
}

// "s<schema index>-<seed>"
std::string test_id(size_t schema, uint64_t seed) {
  std::string id = "s";
  id += static_cast<char>('0' + schema);
  id += "-";
  id += std::to_string(seed);
  return id;
}

struct Out {
  std::string text;
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
};

std::map<std::string, Out> RunAll(Engine& e) {
  std::map<std::string, Out> res;
  while (e.HasUnfinished())
    for (const RequestOutput& o : e.Step())
      for (const CompletionDelta& d : o.completions) {
        Out& r = res[o.request_id];
        r.text += d.text;
        r.tokens.insert(r.tokens.end(), d.token_ids.begin(), d.token_ids.end());
        if (d.finish_reason) r.finish = d.finish_reason;
      }
  return res;
}

const std::vector<std::string>& Schemas() {
  static const std::vector<std::string> s = {
      R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
          "ok": {"type": "boolean"}}, "required": ["name", "age", "ok"]})",
      R"({"type": "array", "items": {"enum": ["red", "green", 7, null]}, "minItems": 1, "maxItems": 3})",
      R"({"type": "object", "properties": {"v": {"anyOf": [{"type": "number"}, {"type": "null"},
          {"type": "object", "properties": {"w": {"const": "x"}}, "required": ["w"]}]}}, "required": ["v"]})",
      R"({"$defs": {"n": {"type": "object", "properties": {"k": {"type": "array", "items": {"$ref": "#/$defs/n"},
          "maxItems": 2}}, "required": ["k"]}}, "$ref": "#/$defs/n"})",
      "json_object",
  };
  return s;
}

TEST(StructuredOutputEngine, SampledOutputsParseAndValidateAgainstTheSchema) {
  const Tokenizer* tok = so_test::Qwen3Tokenizer();
  ASSERT_NE(tok, nullptr);
  Engine e(Config(), TinyModel(), *tok);
  int finished_values = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    for (size_t s = 0; s < Schemas().size(); ++s)
      e.AddRequest(Constrained(test_id(s, seed), Schemas()[s], seed, 200));
    for (auto& [id, out] : RunAll(e)) {
      const size_t s = static_cast<size_t>(id[1] - '0');
      ASSERT_TRUE(out.finish.has_value()) << id;
      if (*out.finish == FinishReason::kLength) continue;  // cut off: not a whole value
      EXPECT_EQ(*out.finish, FinishReason::kStop) << id;
      ++finished_values;
      const Json v = Json::parse(out.text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << id << ": " << out.text;
      if (Schemas()[s] == "json_object") {
        EXPECT_TRUE(v.is_object()) << out.text;
      } else {
        const Json schema = Json::parse(Schemas()[s]);
        EXPECT_TRUE(so_test::Validates(v, schema, schema)) << id << ": " << out.text;
      }
    }
  }
  EXPECT_GE(finished_values, 10);  // most values end within 200 tokens
}

TEST(StructuredOutputEngine, PreemptionKeepsTheGrammarInStepWithTheTokens) {
  const Tokenizer* tok = so_test::Qwen3Tokenizer();
  ASSERT_NE(tok, nullptr);
  std::map<std::string, Out> want;
  {
    Engine e(Config(), TinyModel(), *tok);
    for (size_t s = 0; s < 4; ++s) e.AddRequest(Constrained(test_id(s, 9), Schemas()[s], 9 + s, 120));
    want = RunAll(e);
  }
  // Room for 5 blocks of 16 tokens: the four requests cannot all keep theirs.
  const int64_t per_block = TinyModel()->KvCacheBytesPerBlock(16);
  EngineConfig c = Config(5 * per_block);
  c.max_model_len = 80;
  Engine e(c, TinyModel(), *tok);
  for (size_t s = 0; s < 4; ++s) e.AddRequest(Constrained(test_id(s, 9), Schemas()[s], 9 + s, 60));
  auto got = RunAll(e);
  EXPECT_GT(e.metrics().num_preemptions, 0u);
  for (auto& [id, out] : got) {
    // Seeded draws: the same tokens as without preemption, as far as this run went.
    const std::vector<int32_t>& w = want[id].tokens;
    ASSERT_LE(out.tokens.size(), w.size()) << id;
    EXPECT_TRUE(std::equal(out.tokens.begin(), out.tokens.end(), w.begin())) << id;
    if (out.finish == FinishReason::kStop) {
      const Json schema = Json::parse(Schemas()[static_cast<size_t>(id[1] - '0')]);
      EXPECT_TRUE(so_test::Validates(Json::parse(out.text), schema, schema)) << out.text;
    }
  }
}

}  // namespace
}  // namespace vtllm::engine
