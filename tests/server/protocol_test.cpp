#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/error.h"
#include "server/protocol.h"
#include "server_test_util.h"

namespace vtllm::server {
namespace {

using test::ErrorOf;

Json J(const char* s) { return Json::parse(s); }

TEST(ErrorBody, HasOpenAIShape) {
  const Json j = Json::parse(ErrorBody(BadRequest("temperature", "temperature must be non-negative")));
  EXPECT_EQ(j["error"]["message"], "temperature must be non-negative");
  EXPECT_EQ(j["error"]["type"], "BadRequestError");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], 400);
  const Json n = Json::parse(ErrorBody(NotFound("", "gone")));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_EQ(n["error"]["code"], 404);
  EXPECT_EQ(Json::parse(ErrorBody(Unauthorized()))["error"]["code"], 401);
}

TEST(ParseBody, RejectsBadJsonDeepNestingAndNonObjects) {
  EXPECT_EQ(ErrorOf([] { ParseBody("{\"a\":"); }).status(), 400);
  EXPECT_EQ(ErrorOf([] { ParseBody("[1,2]"); }).status(), 400);
  EXPECT_EQ(ErrorOf([] { ParseBody(std::string(100000, '[')); }).status(), 400);
  EXPECT_EQ(ErrorOf([] { ParseBody("{\"s\":\"\xff\xfe\"}"); }).status(), 400);  // invalid UTF-8
  EXPECT_EQ(ErrorOf([] { ParseBody("{\"n\": 55e555555555}"); }).status(), 400);   // number overflow
  EXPECT_NO_THROW(ParseBody("{\"s\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}"));
}

TEST(Completions, TokenIdPromptsWithoutTokenizer) {
  ProtocolContext ctx;
  ctx.served_model_names = {"m"};
  ctx.max_model_len = 16;
  ctx.vocab_size = 100;
  ParsedRequest r = ParseCompletionRequest(J(R"({"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0})"), ctx);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.params.max_tokens, 4);
  EXPECT_EQ(r.params.temperature, 0.0);
  EXPECT_EQ(r.model, "m");
  r = ParseCompletionRequest(J(R"({"model": "m", "prompt": [[1], [2, 3]], "n": 2})"), ctx);
  EXPECT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_FALSE(r.params.max_tokens.has_value());  // the engine fills in what the context leaves
  EXPECT_EQ(ErrorOf([&] { ParseCompletionRequest(J(R"({"prompt": "text"})"), ctx); }).param(), "prompt");
  EXPECT_EQ(ErrorOf([&] { ParseCompletionRequest(J(R"({"prompt": [100]})"), ctx); }).param(), "prompt");
  EXPECT_EQ(ErrorOf([&] { ParseCompletionRequest(J(R"({"prompt": [1], "model": "x"})"), ctx); }).status(), 404);
  Json many = J(R"({"n": 100})");
  many["prompt"] = Json::array();
  for (int i = 0; i < 50; ++i) many["prompt"].push_back(Json::array({1}));
  EXPECT_EQ(ErrorOf([&] { ParseCompletionRequest(many, ctx); }).param(), "n");  // 5000 completions
}

TEST(Completions, ContextLengthMessagesAsVllm) {
  ProtocolContext ctx;
  ctx.max_model_len = 8;
  ctx.vocab_size = 100;
  ApiError e = ErrorOf([&] { ParseCompletionRequest(J(R"({"prompt": [1,2,3,4,5,6,7,8]})"), ctx); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(std::string(e.what()),
            "This model's maximum context length is 8 tokens. However, your request has 8 input tokens. Please "
            "reduce the length of the input messages.");
  e = ErrorOf([&] { ParseCompletionRequest(J(R"({"prompt": [1,2,3], "max_tokens": 6})"), ctx); });
  EXPECT_EQ(e.param(), "max_tokens");
  EXPECT_NE(std::string(e.what()).find("(6 > 8 - 3)"), std::string::npos);
  EXPECT_NO_THROW(ParseCompletionRequest(J(R"({"prompt": [1,2,3], "max_tokens": 5})"), ctx));
}

struct BadField {
  const char* body;
  const char* param;
};

class CompletionsRanges : public ::testing::TestWithParam<BadField> {};

TEST_P(CompletionsRanges, Rejected) {
  ProtocolContext ctx;
  ctx.max_model_len = 64;
  ctx.vocab_size = 100;
  const ApiError e = ErrorOf([&] { ParseCompletionRequest(Json::parse(GetParam().body), ctx); });
  EXPECT_EQ(e.status(), 400) << GetParam().body;
  EXPECT_EQ(e.param(), GetParam().param) << GetParam().body << ": " << e.what();
}

INSTANTIATE_TEST_SUITE_P(
    Fields, CompletionsRanges,
    ::testing::Values(BadField{R"({"prompt": [1], "temperature": -0.1})", "temperature"},
                      BadField{R"({"prompt": [1], "temperature": "hot"})", "temperature"},
                      BadField{R"({"prompt": [1], "top_p": 0})", "top_p"},
                      BadField{R"({"prompt": [1], "top_p": 1.5})", "top_p"},
                      BadField{R"({"prompt": [1], "top_k": -2})", "top_k"},
                      BadField{R"({"prompt": [1], "top_k": 1.5})", "top_k"},
                      BadField{R"({"prompt": [1], "min_p": 2})", "min_p"},
                      BadField{R"({"prompt": [1], "presence_penalty": 3})", "presence_penalty"},
                      BadField{R"({"prompt": [1], "frequency_penalty": -2.5})", "frequency_penalty"},
                      BadField{R"({"prompt": [1], "repetition_penalty": 0})", "repetition_penalty"},
                      BadField{R"({"prompt": [1], "n": 0})", "n"},
                      BadField{R"({"prompt": [1], "n": 100000})", "n"},
                      BadField{R"({"prompt": [1], "max_tokens": 0})", "max_tokens"},
                      BadField{R"({"prompt": [1], "max_tokens": "5"})", "max_tokens"},
                      BadField{R"({"prompt": [1], "logprobs": 21})", "logprobs"},
                      BadField{R"({"prompt": [1], "logprobs": true})", "logprobs"},
                      BadField{R"({"prompt": [1], "stop": 5})", "stop"},
                      BadField{R"({"prompt": [1], "stop": [""]})", "stop"},
                      BadField{R"({"prompt": [1], "stop_token_ids": [1000]})", "stop_token_ids"},
                      BadField{R"({"prompt": [1], "logit_bias": {"abc": 1}})", "logit_bias"},
                      BadField{R"({"prompt": [1], "logit_bias": {"5": "x"}})", "logit_bias"},
                      BadField{R"({"prompt": [1], "logit_bias": [1]})", "logit_bias"},
                      BadField{R"({"prompt": [1], "stream_options": {"include_usage": true}})", "stream_options"},
                      BadField{R"({"prompt": [1], "stream": "yes"})", "stream"},
                      BadField{R"({"prompt": [1], "min_tokens": -1})", "min_tokens"},
                      BadField{R"({"prompt": [1], "min_tokens": 5, "max_tokens": 2})", "min_tokens"},
                      BadField{R"({"prompt": [1], "priority": 3})", "priority"},
                      BadField{R"({"prompt": [1], "cache_salt": ""})", "cache_salt"},
                      BadField{R"({"prompt": [1], "seed": "x"})", "seed"},
                      BadField{R"({"prompt": [1], "echo": 1})", "echo"},
                      BadField{R"({"prompt": [1], "response_format": {"type": "regex"}})", "response_format.type"},
                      BadField{R"({"prompt": []})", "prompt"},
                      BadField{R"({"prompt": [[1], 2]})", "prompt"},
                      BadField{R"({"prompt": [-1]})", "prompt"},
                      BadField{R"({"prompt": {"a": 1}})", "prompt"},
                      BadField{R"({"prompt": [[]]})", "prompt"},
                      BadField{R"({})", "prompt"}));

TEST(Completions, TextPromptsAndEcho) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  ParsedRequest r = ParseCompletionRequest(J(R"({"prompt": ["Hello world", "Hi"], "echo": true, "logprobs": 2,
                                                 "stop": "\n", "seed": 7, "unknown_field": {"x": 1}})"),
                                           env->ctx);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0], env->tokenizer.Encode("Hello world"));
  EXPECT_EQ(r.prompt_texts[1], "Hi");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(r.params.prompt_logprobs, 2);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.params.seed, 7u);
}

TEST(Completions, UnsetFieldsTakeTheDefaults) {
  ProtocolContext ctx;
  ctx.vocab_size = 10;
  ctx.defaults.temperature = 0.6;
  ctx.defaults.top_k = 20;
  ParsedRequest r = ParseCompletionRequest(J(R"({"prompt": [1], "top_p": 0.5, "temperature": null})"), ctx);
  EXPECT_EQ(r.params.temperature, 0.6);
  EXPECT_EQ(r.params.top_k, 20);
  EXPECT_EQ(r.params.top_p, 0.5);
}

TEST(Chat, RendersTheTemplate) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  ParsedRequest r = ParseChatRequest(J(R"({"model": "alias", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}],
      "chat_template_kwargs": {"enable_thinking": false}, "max_completion_tokens": 5, "logprobs": true,
      "top_logprobs": 3})"),
                                     env->ctx);
  EXPECT_EQ(r.model, "alias");
  EXPECT_EQ(r.prompt_texts[0],
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n"
            "<think>\n\n</think>\n\n");
  EXPECT_EQ(r.prompts[0], env->tokenizer.Encode(r.prompt_texts[0]));
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_TRUE(r.parse_reasoning);
  EXPECT_FALSE(r.prompt_opens_reasoning);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
}

TEST(Chat, ToolsAndToolChoice) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  const char* tools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  ParsedRequest r = ParseChatRequest(
      Json::parse(std::string(R"({"messages": [{"role": "user", "content": "Weather?"}], )") + tools + "}"), env->ctx);
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.parse_tools);
  EXPECT_NE(r.prompt_texts[0].find("<tools>\n{\"type\": \"function\""), std::string::npos);
  r = ParseChatRequest(Json::parse(std::string(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice":
      {"type": "function", "function": {"name": "get_weather"}}, )") + tools + "}"), env->ctx);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.named_tool, "get_weather");
  EXPECT_EQ(ErrorOf([&] {
              ParseChatRequest(Json::parse(std::string(R"({"messages": [{"role": "user", "content": "x"}],
                  "tool_choice": {"type": "function", "function": {"name": "nope"}}, )") + tools + "}"), env->ctx);
            }).param(),
            "tool_choice");
  EXPECT_EQ(ErrorOf([&] {
              ParseChatRequest(J(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})"), env->ctx);
            }).param(),
            "tool_choice");
  // Without --enable-auto-tool-choice, "auto" is refused as vLLM does.
  ProtocolContext no_auto = env->ctx;
  no_auto.enable_auto_tool_choice = false;
  EXPECT_EQ(ErrorOf([&] {
              ParseChatRequest(Json::parse(std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + tools + "}"), no_auto);
            }).param(),
            "tool_choice");
  r = ParseChatRequest(Json::parse(std::string(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none", )") + tools + "}"), no_auto);
  EXPECT_FALSE(r.parse_tools);
}

TEST(Chat, AssistantToolCallHistoryAndContinueFinalMessage) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  ParsedRequest r = ParseChatRequest(J(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "assistant", "content": "It is"}],
      "continue_final_message": true, "add_generation_prompt": false})"),
                                     env->ctx);
  const std::string& t = r.prompt_texts[0];
  EXPECT_NE(t.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos);
  EXPECT_TRUE(t.size() >= 5 && t.compare(t.size() - 5, 5, "It is") == 0) << t;
  EXPECT_EQ(ErrorOf([&] {
              ParseChatRequest(J(R"({"messages": [{"role": "assistant", "content": "x"}], "continue_final_message": true,
                                     "add_generation_prompt": true})"), env->ctx);
            }).param(),
            "continue_final_message");
}

TEST(Chat, BadMessages) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  for (const char* body : {R"({"messages": []})", R"({"messages": "hi"})", R"({"messages": [{"content": "x"}]})",
                           R"({"messages": [{"role": "wizard", "content": "x"}]})",
                           R"({"messages": [{"role": "user", "content": 5}]})",
                           R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
                           R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                           R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
                           R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
                           R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 3})",
                           R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
                           R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": 5})"}) {
    const ApiError e = ErrorOf([&] { ParseChatRequest(Json::parse(body), env->ctx); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_FALSE(e.param().empty()) << body;
  }
}

TEST(Tokenize, PromptAndMessages) {
  const test::Qwen3Env* env = test::Qwen3();
  ASSERT_TRUE(env);
  TokenizeResult t = ParseTokenizeRequest(J(R"({"prompt": "Hello"})"), env->ctx);
  EXPECT_EQ(t.tokens, env->tokenizer.Encode("Hello"));
  t = ParseTokenizeRequest(J(R"({"messages": [{"role": "user", "content": "Hi"}]})"), env->ctx);
  ASSERT_TRUE(t.rendered);
  EXPECT_EQ(t.tokens, env->tokenizer.Encode(*t.rendered));
  EXPECT_EQ(ParseDetokenizeRequest(J(R"({"tokens": [9707]})"), env->ctx), std::vector<int32_t>{9707});
  EXPECT_EQ(ErrorOf([&] { ParseDetokenizeRequest(J(R"({"tokens": [-3]})"), env->ctx); }).param(), "tokens");
}

}  // namespace
}  // namespace vtllm::server
