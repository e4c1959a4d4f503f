#include <gtest/gtest.h>

#include "server/response.h"
#include "server_test_util.h"

namespace vtllm::server {
namespace {

using engine::CompletionDelta;
using engine::FinishReason;
using engine::RequestOutput;

ParsedRequest Completion(int n = 1, size_t prompts = 1) {
  ParsedRequest r;
  r.endpoint = Endpoint::kCompletions;
  r.model = std::string("m");
  r.params.n = n;
  for (size_t i = 0; i < prompts; ++i) {
    r.prompts.push_back({1, 2, 3});
    std::string text = "P";
    text += std::to_string(i);
    r.prompt_texts.push_back(text);
  }
  return r;
}

RequestOutput Out(int index, std::vector<int32_t> ids, std::string text, std::optional<FinishReason> finish = {},
                  bool finished = false) {
  RequestOutput o;
  o.request_id = "r";
  o.num_prompt_tokens = 3;
  o.num_cached_tokens = 1;
  CompletionDelta d;
  d.index = index;
  d.token_ids = std::move(ids);
  d.text = std::move(text);
  d.finish_reason = finish;
  o.completions.push_back(d);
  o.finished = finished;
  return o;
}

ResponseMeta Meta() { return {"cmpl-x", 123, "m", nullptr}; }

TEST(Response, CompletionNonStreamingWithUsage) {
  ParsedRequest req = Completion();
  ResponseBuilder b(req, Meta());
  EXPECT_TRUE(b.Add(0, Out(0, {5}, "Hel")).empty());  // not streaming: no chunks
  RequestOutput last = Out(0, {6}, "lo", FinishReason::kLength, true);
  last.completions[0].num_generated = 2;
  b.Add(0, last);
  EXPECT_TRUE(b.finished());
  const Json r = b.Response();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["id"], "cmpl-x");
  EXPECT_EQ(r["created"], 123);
  EXPECT_EQ(r["choices"][0]["text"], "Hello");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(r["choices"][0]["stop_reason"].is_null());
  EXPECT_EQ(r["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(r["usage"]["completion_tokens"], 2);
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(Response, ChoicesIndexedPerPromptTimesN) {
  ParsedRequest req = Completion(2, 2);
  ResponseBuilder b(req, Meta());
  b.Add(1, Out(1, {5}, "b1", FinishReason::kStop));
  b.Add(0, Out(0, {5}, "a0", FinishReason::kStop));
  b.Add(1, Out(0, {5}, "b0", FinishReason::kStop, true));
  b.Add(0, Out(1, {5}, "a1", FinishReason::kStop, true));
  const Json r = b.Response();
  ASSERT_EQ(r["choices"].size(), 4u);
  EXPECT_EQ(r["choices"][0]["text"], "a0");
  EXPECT_EQ(r["choices"][1]["text"], "a1");
  EXPECT_EQ(r["choices"][2]["text"], "b0");
  EXPECT_EQ(r["choices"][3]["index"], 3);
  EXPECT_EQ(r["choices"][3]["text"], "b1");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 6);
}

TEST(Response, CompletionStreamEchoStopReasonAndUsageChunk) {
  ParsedRequest req = Completion();
  req.stream = true;
  req.echo = true;
  req.include_usage = true;
  ResponseBuilder b(req, Meta());
  EXPECT_TRUE(b.Start().empty());
  std::vector<Json> c = b.Add(0, Out(0, {5}, " a"));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0]["text"], "P0 a");
  EXPECT_TRUE(c[0]["choices"][0]["finish_reason"].is_null());
  RequestOutput last = Out(0, {}, "", FinishReason::kStop, true);
  last.completions[0].stop_string = "\n";
  c = b.Add(0, last);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c[0]["choices"][0]["stop_reason"], "\n");
  c = b.End();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0]["choices"].empty());
  EXPECT_EQ(c[0]["usage"]["completion_tokens"], 1);
}

TEST(Response, CompletionLogprobsShape) {
  ParsedRequest req = Completion();
  req.params.logprobs = 1;
  ResponseBuilder b(req, Meta());
  RequestOutput o = Out(0, {7, 8}, "xy", FinishReason::kLength, true);
  engine::PositionLogprobs p1{{7, -0.5f, 1}, {{7, -0.5f, 1}}}, p2{{8, -1.5f, 2}, {{9, -1.0f, 1}}};
  o.completions[0].logprobs = {p1, p2};
  b.Add(0, o);
  const Json lp = b.Response()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"token_id:7", "token_id:8"}));
  EXPECT_EQ(lp["token_logprobs"][1], -1.5);
  EXPECT_EQ(lp["top_logprobs"][1]["token_id:9"], -1.0);
  EXPECT_EQ(lp["top_logprobs"][1]["token_id:8"], -1.5);  // the sampled token is listed too
  EXPECT_EQ(lp["text_offset"], Json::array({0, 10}));
}

ParsedRequest Chat() {
  ParsedRequest r;
  r.endpoint = Endpoint::kChat;
  r.model = std::string("m");
  r.prompts.push_back({1, 2});
  r.prompt_texts.push_back("prompt");
  return r;
}

TEST(Response, ChatReasoningAndToolCallsNonStreaming) {
  ParsedRequest req = Chat();
  req.parse_reasoning = true;
  req.parse_tools = true;
  req.tool_choice = ToolChoice::kAuto;
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", nullptr});
  b.Add(0, Out(0, {1}, "<think>hmm</think>\n\nOk.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}"));
  b.Add(0, Out(0, {2}, "\n</tool_call>", FinishReason::kStop, true));
  const Json r = b.Response();
  EXPECT_EQ(r["object"], "chat.completion");
  const Json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["reasoning"], "hmm");
  EXPECT_EQ(m["content"], "\n\nOk.\n");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST(Response, ChatStreamingDeltas) {
  ParsedRequest req = Chat();
  req.stream = true;
  req.parse_reasoning = true;
  req.parse_tools = true;
  req.tool_choice = ToolChoice::kAuto;
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", nullptr});
  std::vector<Json> start = b.Start();
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(start[0]["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content;
  Json calls = Json::array();
  std::string finish;
  const std::vector<std::string> pieces = {"<thi", "nk>a", "b</th", "ink>Hi", " <tool_", "call>{\"name\": \"g\", ",
                                           "\"arguments\": {\"x", "\": [1, 2]", "}}</tool_call>"};
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool last = i + 1 == pieces.size();
    for (const Json& c : b.Add(0, Out(0, {1}, pieces[i], last ? std::optional(FinishReason::kStop) : std::nullopt, last))) {
      const Json& d = c["choices"][0]["delta"];
      if (d.contains("reasoning")) reasoning += d["reasoning"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const Json& t : d["tool_calls"]) calls.push_back(t);
      if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    }
  }
  EXPECT_EQ(reasoning, "ab");
  EXPECT_EQ(content, "Hi ");
  // As OpenAI streams calls: the first entry has id, type and name, later ones argument text.
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "g");
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  std::string arguments;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i]["index"], 0);
    if (i > 0) {
      EXPECT_FALSE(calls[i].contains("id"));
    }
    arguments += calls[i]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, "{\"x\": [1, 2]}");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(Response, NamedToolChoiceStreamsOnlyThatTool) {
  ParsedRequest req = Chat();
  req.stream = true;
  req.parse_tools = true;
  req.tool_choice = ToolChoice::kNamed;
  req.named_tool = "keep";
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", nullptr});
  b.Start();
  const std::string text =
      "<tool_call>{\"name\": \"drop\", \"arguments\": {\"a\": 1}}</tool_call>"
      "<tool_call>{\"name\": \"keep\", \"arguments\": {\"b\": 2}}</tool_call>";
  Json calls = Json::array();
  for (size_t i = 0; i < text.size(); i += 7) {
    const bool last = i + 7 >= text.size();
    for (const Json& c : b.Add(0, Out(0, {1}, text.substr(i, 7), last ? std::optional(FinishReason::kStop) : std::nullopt, last))) {
      const Json& d = c["choices"][0]["delta"];
      if (d.contains("tool_calls"))
        for (const Json& t : d["tool_calls"]) calls.push_back(t);
    }
  }
  ASSERT_FALSE(calls.empty());
  std::string arguments;
  for (const Json& t : calls) {
    EXPECT_EQ(t["index"], 0);
    if (t.contains("id")) {
      EXPECT_EQ(t["function"]["name"], "keep");
    }
    arguments += t["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, "{\"b\": 2}");
}

TEST(Response, ChatWithoutParsersKeepsTextAsContent) {
  ParsedRequest req = Chat();
  req.params.logprobs = 0;
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", nullptr});
  RequestOutput o = Out(0, {4}, "<think>x</think><tool_call>{}</tool_call>", FinishReason::kAbort, true);
  o.completions[0].logprobs = {{{4, -std::numeric_limits<float>::infinity(), 3}, {}}};
  b.Add(0, o);
  const Json r = b.Response();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "<think>x</think><tool_call>{}</tool_call>");
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "abort");
  const Json& lp = r["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["logprob"], -9999.0);
  EXPECT_EQ(lp["token"], "token_id:4");
  EXPECT_TRUE(lp["bytes"].is_array());
}

TEST(Response, PromptLogprobsAsVllm) {
  ParsedRequest req = Completion();
  req.return_prompt_logprobs = true;
  ResponseBuilder b(req, Meta());
  RequestOutput o = Out(0, {5}, "x", FinishReason::kLength, true);
  o.prompt_logprobs = std::vector<engine::PositionLogprobs>{{{2, -1.0f, 3}, {{9, -0.5f, 1}}}, {{3, -2.0f, 4}, {}}};
  b.Add(0, o);
  const Json pl = b.Response()["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 3u);
  EXPECT_TRUE(pl[0].is_null());
  EXPECT_EQ(pl[1]["2"]["logprob"], -1.0);
  EXPECT_EQ(pl[1]["2"]["rank"], 3);
  EXPECT_EQ(pl[1]["9"]["decoded_token"], "token_id:9");
  EXPECT_EQ(pl[2]["3"]["rank"], 4);
}

TEST(Response, EngineErrorIsReported) {
  ParsedRequest req = Chat();
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", nullptr});
  RequestOutput o;
  o.error = "step failed";
  o.finished = true;
  b.Add(0, o);
  EXPECT_TRUE(b.finished());
  ASSERT_TRUE(b.error());
  EXPECT_EQ(*b.error(), "step failed");
}

TEST(Response, RealTokenizerTokenText) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  ParsedRequest req = Chat();
  req.params.logprobs = 1;
  ResponseBuilder b(req, {"chatcmpl-x", 1, "m", &env->tokenizer});
  const int32_t id = env->tokenizer.Encode(" world")[0];
  RequestOutput o = Out(0, {id}, " world", FinishReason::kStop, true);
  o.completions[0].stop_token_id = *env->tokenizer.eos_token_id();
  o.completions[0].logprobs = {{{id, -0.1f, 1}, {{id, -0.1f, 1}}}};
  b.Add(0, o);
  const Json r = b.Response();
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["token"], " world");
  EXPECT_TRUE(r["choices"][0]["stop_reason"].is_null());  // the tokenizer's EOS
}

}  // namespace
}  // namespace vtllm::server
