// Structured outputs in the server: response_format / structured_outputs / guided_json parsed
// into the engine's params with 400s naming the field, tool_choice named / required turned into
// grammars and read back as tool calls (streaming and not), and the whole path on the embedded
// default model (sampling at temperature 1 under the grammar: the JSON parses and validates).
#include <gtest/gtest.h>

#include "engine/structured_output.h"
#include "server/response.h"
#include "server/serving.h"
#include "server_test_util.h"

namespace vtllm::server {
namespace {

using engine::FinishReason;
using Kind = engine::StructuredOutputParams::Kind;
using test::ErrorOf;

Json J(const std::string& s) { return Json::parse(s); }

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])";

Json ChatBody(const std::string& extra) {
  return J(R"({"messages": [{"role": "user", "content": "Weather in Paris?"}])" + extra + "}");
}

TEST(StructuredOutputProtocol, ResponseFormatStructuredOutputsAndGuidedJson) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  ParsedRequest r = ParseChatRequest(ChatBody(R"(, "response_format": {"type": "json_object"})"), env->ctx);
  EXPECT_EQ(r.params.structured.kind, Kind::kJsonObject);
  EXPECT_FALSE(r.parse_reasoning);  // the value starts at the first token
  r = ParseChatRequest(ChatBody(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "w",
      "schema": {"type": "object", "properties": {"t": {"type": "number"}}}, "strict": true}})"), env->ctx);
  EXPECT_EQ(r.params.structured.kind, Kind::kJsonSchema);
  EXPECT_EQ(J(r.params.structured.json_schema), J(R"({"type": "object", "properties": {"t": {"type": "number"}}})"));
  r = ParseCompletionRequest(J(R"({"prompt": "x", "structured_outputs": {"json": {"type": "integer"}}})"), env->ctx);
  EXPECT_EQ(J(r.params.structured.json_schema), J(R"({"type": "integer"})"));
  r = ParseCompletionRequest(J(R"({"prompt": "x", "guided_json": "{\"enum\": [1, 2]}"})"), env->ctx);
  EXPECT_EQ(r.params.structured.field, "guided_json");
  EXPECT_EQ(J(r.params.structured.json_schema), J(R"({"enum": [1, 2]})"));

  // Bad input: 400 naming the field.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "w",
          "schema": {"type": "string", "pattern": "a+"}}}})", "response_format.json_schema.schema"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": 5}}})",
       "response_format.json_schema.schema"},
      {R"({"prompt": "x", "response_format": {"type": "yaml"}})", "response_format.type"},
      {R"({"prompt": "x", "guided_json": {"type": "object", "properties": {"a": {"minimum": 1}}}})", "guided_json"},
      {R"({"prompt": "x", "structured_outputs": {"regex": "a+"}})", "structured_outputs.regex"},
      {R"({"prompt": "x", "guided_choice": ["a"]})", "guided_choice"},
      {R"({"prompt": "x", "guided_json": {}, "structured_outputs": {"json": {}}})", "guided_json"},
  };
  for (const auto& [body, param] : bad) {
    const ApiError e = ErrorOf([&] { ParseCompletionRequest(J(body), env->ctx); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body << ": " << e.what();
  }
  const ApiError e = ErrorOf([&] {
    ParseCompletionRequest(J(R"({"prompt": "x", "guided_json": {"type": "string", "format": "date"}})"), env->ctx);
  });
  EXPECT_NE(std::string(e.what()).find("'format'"), std::string::npos) << e.what();
}

TEST(StructuredOutputProtocol, ToolChoiceNamedAndRequiredBecomeGrammars) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  ProtocolContext ctx = env->ctx;
  ctx.enable_auto_tool_choice = false;  // not needed for named / required
  ctx.tool_call_parser.clear();
  ParsedRequest r = ParseChatRequest(
      ChatBody(std::string(R"(, "tools": )") + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"), ctx);
  EXPECT_TRUE(r.guided_tools);
  EXPECT_FALSE(r.parse_tools);
  EXPECT_EQ(r.params.structured.field, "tools[0].function.parameters");
  EXPECT_EQ(J(r.params.structured.json_schema), J(kTools)[0]["function"]["parameters"]);

  r = ParseChatRequest(ChatBody(std::string(R"(, "tools": )") + kTools + R"(, "tool_choice": "required")"), ctx);
  ASSERT_EQ(r.params.structured.kind, Kind::kJsonSchema);
  engine::GrammarMatcher m(engine::JsonGrammar::FromSchema(r.params.structured.json_schema, "tools"));
  EXPECT_TRUE(m.AcceptBytes(R"([{"name": "get_time", "parameters": {}}, {"parameters": {"city": "P"}, "name": "get_weather"}])"));
  EXPECT_TRUE(m.IsComplete());
  for (const std::string no : {R"([])", R"([{"name": "other", "parameters": {}}])",
                               R"([{"name": "get_weather", "parameters": {"days": 1}}])"}) {
    engine::GrammarMatcher fresh(engine::JsonGrammar::FromSchema(r.params.structured.json_schema, "tools"));
    EXPECT_FALSE(fresh.AcceptBytes(no) && fresh.IsComplete()) << no;
  }
  const std::string bad_tools = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"type": "string", "maxLength": 3}}}}}])";
  for (const std::string choice : {R"("required")", R"({"type": "function", "function": {"name": "f"}})"}) {
    const ApiError e = ErrorOf([&] {
      ParseChatRequest(ChatBody(R"(, "tools": )" + bad_tools + R"(, "tool_choice": )" + choice), ctx);
    });
    EXPECT_EQ(e.status(), 400) << choice;
    EXPECT_EQ(e.param(), "tools[0].function.parameters") << choice;
  }
  const ApiError both = ErrorOf([&] {
    ParseChatRequest(ChatBody(std::string(R"(, "tools": )") + kTools +
                              R"(, "tool_choice": "required", "response_format": {"type": "json_object"})"), ctx);
  });
  EXPECT_EQ(both.param(), "response_format");
}

ParsedRequest GuidedChat(ToolChoice choice, bool stream) {
  ParsedRequest r;
  r.endpoint = Endpoint::kChat;
  r.model = "m";
  r.prompts.push_back({1, 2});
  r.prompt_texts.push_back("p");
  r.stream = stream;
  r.tool_choice = choice;
  r.named_tool = choice == ToolChoice::kNamed ? "get_weather" : "";
  r.guided_tools = true;
  return r;
}

engine::RequestOutput Piece(const std::string& text, bool last) {
  engine::RequestOutput o;
  o.request_id = "r";
  o.num_prompt_tokens = 2;
  engine::CompletionDelta d;
  d.text = text;
  d.token_ids = {7};
  if (last) d.finish_reason = FinishReason::kStop;
  o.completions.push_back(d);
  o.finished = last;
  return o;
}

// Feeds `text` in pieces of `step` bytes; returns the response (non-streaming) or the chunks'
// tool-call deltas and the finish reason (streaming).
struct Read {
  Json message;
  std::vector<Json> deltas;
  std::string finish;
};
Read FeedText(const ParsedRequest& req, const std::string& text, size_t step) {
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", nullptr});
  Read out;
  for (const Json& c : b.Start()) (void)c;
  for (size_t i = 0; i < text.size(); i += step) {
    const bool last = i + step >= text.size();
    for (const Json& c : b.Add(0, Piece(text.substr(i, step), last))) {
      const Json& ch = c["choices"][0];
      if (ch["delta"].contains("tool_calls"))
        for (const Json& t : ch["delta"]["tool_calls"]) out.deltas.push_back(t);
      if (!ch["finish_reason"].is_null()) out.finish = ch["finish_reason"];
    }
  }
  if (!req.stream) {
    const Json r = b.Response();
    out.message = r["choices"][0]["message"];
    out.finish = r["choices"][0]["finish_reason"];
  }
  return out;
}

TEST(StructuredOutputResponse, NamedToolChoiceIsOneCallOfTheWholeOutput) {
  const std::string args = R"({"city": "Par\"is", "days": 3})";
  const Read whole = FeedText(GuidedChat(ToolChoice::kNamed, false), args, 5);
  EXPECT_EQ(whole.finish, "stop");  // as vLLM reports a named tool choice
  EXPECT_EQ(whole.message["content"], "");
  ASSERT_EQ(whole.message["tool_calls"].size(), 1u);
  EXPECT_EQ(whole.message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(whole.message["tool_calls"][0]["function"]["arguments"], args);
  EXPECT_EQ(whole.message["tool_calls"][0]["type"], "function");

  const Read streamed = FeedText(GuidedChat(ToolChoice::kNamed, true), args, 4);
  EXPECT_EQ(streamed.finish, "stop");
  ASSERT_FALSE(streamed.deltas.empty());
  EXPECT_EQ(streamed.deltas[0]["function"]["name"], "get_weather");
  EXPECT_TRUE(streamed.deltas[0].contains("id"));
  std::string joined;
  for (size_t i = 0; i < streamed.deltas.size(); ++i) {
    EXPECT_EQ(streamed.deltas[i]["index"], 0);
    EXPECT_EQ(streamed.deltas[i].contains("id"), i == 0);
    joined += streamed.deltas[i]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(joined, args);
}

TEST(StructuredOutputResponse, RequiredToolChoiceGivesEachArrayElementAsACall) {
  const std::string text = R"([{"name": "get_weather", "parameters": {"city": "a}]\"", "days": 2}},
      {"parameters": {}, "name": "get_time"}])";
  for (size_t step : {1, 3, 1000}) {
    const Read whole = FeedText(GuidedChat(ToolChoice::kRequired, false), text, step);
    EXPECT_EQ(whole.finish, "tool_calls");
    ASSERT_EQ(whole.message["tool_calls"].size(), 2u) << step;
    EXPECT_EQ(whole.message["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(J(whole.message["tool_calls"][0]["function"]["arguments"]), J(R"({"city": "a}]\"", "days": 2})"));
    EXPECT_EQ(whole.message["tool_calls"][1]["function"]["name"], "get_time");
    EXPECT_EQ(whole.message["tool_calls"][1]["function"]["arguments"], "{}");
    const Read streamed = FeedText(GuidedChat(ToolChoice::kRequired, true), text, step);
    EXPECT_EQ(streamed.finish, "tool_calls");
    ASSERT_EQ(streamed.deltas.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(streamed.deltas[i]["index"], i);
      EXPECT_EQ(streamed.deltas[i]["function"], whole.message["tool_calls"][i]["function"]);
    }
  }
}

// The whole path on the embedded default model (a Qwen3 of vocabulary 4096 with a chat
// template): sampled at temperature 1, the outputs are JSON that fits the schema.
class StructuredOutputServing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine::EngineConfig c;
    c.model_dir = std::string(VTLLM_SOURCE_DIR) + "/models/default/bf16";
    c.max_model_len = 512;
    c.max_num_seqs = 8;
    c.load.progress = false;
    c.load.dtype = vt::DType::kF32;
    engine_ = new engine::AsyncEngine(c);
    serving_ = new Serving(*engine_, ServingOptions{});
  }
  static void TearDownTestSuite() {
    delete serving_;
    delete engine_;
  }
  static Json Complete(const Json& body) {
    Generation g(*serving_, serving_->ParseJson(Endpoint::kChat, body));
    return *g.Complete();
  }
  static std::vector<Json> Stream(Json body) {
    body["stream"] = true;
    Generation g(*serving_, serving_->ParseJson(Endpoint::kChat, body));
    std::vector<Json> chunks = g.Start();
    while (!g.Poll(std::chrono::milliseconds(100), chunks)) {
    }
    for (Json& c : g.End()) chunks.push_back(std::move(c));
    return chunks;
  }
  static engine::AsyncEngine* engine_;
  static Serving* serving_;
};
engine::AsyncEngine* StructuredOutputServing::engine_ = nullptr;
Serving* StructuredOutputServing::serving_ = nullptr;

TEST_F(StructuredOutputServing, ResponseFormatNamedAndRequiredToolChoiceGiveValidJson) {
  const Json tools = J(kTools);
  int checked = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    Json base = ChatBody(R"(, "temperature": 1, "max_tokens": 160)");
    base["seed"] = seed;
    Json rf = base;
    rf["response_format"] = J(R"({"type": "json_schema", "json_schema": {"name": "w", "schema":
        {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["ok", "n"]}}})");
    const Json r = Complete(rf);
    if (r["choices"][0]["finish_reason"] == "stop") {
      const Json v = J(r["choices"][0]["message"]["content"].get<std::string>());
      EXPECT_TRUE(v["ok"].is_boolean() && v["n"].is_number_integer() && v.size() == 2) << v;
      ++checked;
    }
    Json named = base;
    named["tools"] = tools;
    named["tool_choice"] = J(R"({"type": "function", "function": {"name": "get_weather"}})");
    const Json n = Complete(named);
    ASSERT_EQ(n["choices"][0]["message"]["tool_calls"].size(), 1u) << n;
    const Json& call = n["choices"][0]["message"]["tool_calls"][0]["function"];
    EXPECT_EQ(call["name"], "get_weather");
    if (n["choices"][0]["finish_reason"] == "stop") {
      const Json args = J(call["arguments"].get<std::string>());
      EXPECT_TRUE(args["city"].is_string()) << args;
      ++checked;
    }
    // Streaming the same seeded request gives the same call, in pieces.
    std::string joined;
    for (const Json& c : Stream(named))
      if (!c["choices"].empty() && c["choices"][0].contains("delta") && c["choices"][0]["delta"].contains("tool_calls"))
        for (const Json& t : c["choices"][0]["delta"]["tool_calls"]) joined += t["function"]["arguments"].get<std::string>();
    EXPECT_EQ(joined, call["arguments"].get<std::string>());

    Json required = base;
    required["tools"] = tools;
    required["tool_choice"] = "required";
    const Json q = Complete(required);
    if (q["choices"][0]["finish_reason"] != "length") {
      EXPECT_EQ(q["choices"][0]["finish_reason"], "tool_calls") << q;
      ASSERT_GE(q["choices"][0]["message"]["tool_calls"].size(), 1u) << q;
      for (const Json& t : q["choices"][0]["message"]["tool_calls"]) {
        const std::string name = t["function"]["name"];
        EXPECT_TRUE(name == "get_weather" || name == "get_time") << name;
        EXPECT_TRUE(J(t["function"]["arguments"].get<std::string>()).is_object());
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 3);
}

}  // namespace
}  // namespace vtllm::server
