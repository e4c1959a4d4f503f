#include <gtest/gtest.h>

#include "server/output_parsers.h"

namespace vtllm::server {
namespace {

// Feeds `text` in pieces of `step` bytes and joins the results.
ReasoningDelta RunReasoning(const std::string& text, size_t step, bool starts_inside = false) {
  ReasoningParser p(starts_inside);
  ReasoningDelta all;
  for (size_t i = 0; i < text.size(); i += step) {
    ReasoningDelta d = p.Push(text.substr(i, step));
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta f = p.Finish();
  all.reasoning += f.reasoning;
  all.content += f.content;
  return all;
}

TEST(ReasoningParser, SplitsThinkBlockAtAnyChunking) {
  const std::string text = "<think>\nLet me see.\n</think>\n\nThe answer is 4.";
  for (size_t step : {1u, 2u, 3u, 7u, 100u}) {
    const ReasoningDelta d = RunReasoning(text, step);
    EXPECT_EQ(d.reasoning, "\nLet me see.\n") << step;
    EXPECT_EQ(d.content, "\n\nThe answer is 4.") << step;
  }
}

TEST(ReasoningParser, NoBlockIsContentAndPromptOpenedBlockIsReasoning) {
  EXPECT_EQ(RunReasoning("Plain <thin answer", 1).content, "Plain <thin answer");
  EXPECT_EQ(RunReasoning("<thi", 1).content, "<thi");
  const ReasoningDelta d = RunReasoning("thinking...</think>done", 2, /*starts_inside=*/true);
  EXPECT_EQ(d.reasoning, "thinking...");
  EXPECT_EQ(d.content, "done");
  // Cut off while thinking: what came is reasoning.
  EXPECT_EQ(RunReasoning("<think>unfinished</thi", 3).reasoning, "unfinished</thi");
}

ToolDelta RunTools(const std::string& text, size_t step) {
  HermesToolParser p;
  ToolDelta all;
  auto take = [&](ToolDelta d) {
    all.content += d.content;
    for (auto& c : d.calls) all.calls.push_back(c);
    for (auto& u : d.updates) all.updates.push_back(u);
  };
  for (size_t i = 0; i < text.size(); i += step) take(p.Push(text.substr(i, step)));
  take(p.Finish());
  return all;
}

TEST(HermesToolParser, ParsesBlocksAtAnyChunking) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  for (size_t step : {1u, 4u, 11u, 1000u}) {
    const ToolDelta d = RunTools(text, step);
    EXPECT_EQ(d.content, "Let me check.\n") << step;
    ASSERT_EQ(d.calls.size(), 2u) << step;
    EXPECT_EQ(d.calls[0].name, "get_weather");
    EXPECT_EQ(d.calls[0].arguments, "{\"city\": \"Paris\"}");  // the model's own text
    EXPECT_EQ(d.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
    EXPECT_EQ(d.calls[1].name, "get_time");
    EXPECT_NE(d.calls[0].id, d.calls[1].id);
  }
}

TEST(HermesToolParser, BadBlocksStayContent) {
  EXPECT_EQ(RunTools("no tools here", 3).content, "no tools here");
  ToolDelta d = RunTools("<tool_call>not json</tool_call>", 2);
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(d.content, "<tool_call>not json</tool_call>");
  d = RunTools("a <tool_call>{\"nam", 2);  // cut off before the name is complete
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(d.content, "a <tool_call>{\"nam");
  d = RunTools("a <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": [1, ", 2);  // cut off after it began
  ASSERT_EQ(d.calls.size(), 1u);  // a call that has begun streaming stays a call
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(d.calls[0].arguments, "{\"x\": [1,");
  EXPECT_EQ(d.content, "a ");
}

// Streams as vLLM does: a call begins (id, name) as soon as its name is complete, then its
// arguments arrive in pieces; the pieces of each call concatenate to its complete arguments.
TEST(HermesToolParser, StreamsArgumentsAsTheyAreGenerated) {
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\", \"days\": {\"n\": 3}}}\n</tool_call>\n"
      "<tool_call>{\"arguments\": {\"tz\": \"UTC\"}, \"name\": \"get_time\"}</tool_call>"
      "<tool_call>{\"name\": \"ping\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>"
      "<tool_call>{\"name\": \"noargs\"}</tool_call>";
  for (size_t step : {1u, 2u, 5u, 13u, 1000u}) {
    const ToolDelta d = RunTools(text, step);
    ASSERT_EQ(d.calls.size(), 4u) << step;
    std::vector<std::string> args(4);
    std::vector<size_t> pieces(4, 0);
    for (size_t i = 0; i < d.updates.size(); ++i) {
      const ToolCallUpdate& u = d.updates[i];
      ASSERT_LT(u.index, 4u);
      EXPECT_EQ(u.begin, pieces[u.index] == 0) << step << " update " << i;  // begin first, once
      if (u.begin) {
        EXPECT_EQ(u.id, d.calls[u.index].id);
        EXPECT_EQ(u.name, d.calls[u.index].name);
      }
      args[u.index] += u.arguments;
      ++pieces[u.index];
    }
    for (size_t c = 0; c < 4; ++c) EXPECT_EQ(args[c], d.calls[c].arguments) << step << " call " << c;
    EXPECT_EQ(d.calls[0].name, "get_weather");
    EXPECT_EQ(d.calls[0].arguments, "{\"city\": \"Pa}ris\", \"days\": {\"n\": 3}}");
    EXPECT_EQ(d.calls[1].name, "get_time");  // name after arguments: sent whole at the end
    EXPECT_EQ(d.calls[1].arguments, "{\"tz\":\"UTC\"}");
    EXPECT_EQ(pieces[1], 1u);
    EXPECT_EQ(d.calls[2].arguments, "{\"a\": 1}");  // a string holding JSON is that JSON
    EXPECT_EQ(d.calls[3].arguments, "{}");
    if (step == 1) {
      EXPECT_GT(pieces[0], 10u);  // the first call's arguments really streamed
    }
  }
}

// The fragments never include the block's own closing brace or trailing whitespace, even when
// a chunk ends right after them.
TEST(HermesToolParser, HoldsBackWhatMayCloseTheBlock) {
  HermesToolParser p;
  std::string streamed;
  auto push = [&](std::string_view s) {
    for (const ToolCallUpdate& u : p.Push(s).updates) streamed += u.arguments;
  };
  push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}");
  EXPECT_EQ(streamed, "{\"a\": {\"b\": 1");
  push("}} \n");
  EXPECT_EQ(streamed, "{\"a\": {\"b\": 1");
  push("</tool_call>");
  EXPECT_EQ(streamed, "{\"a\": {\"b\": 1}}");
}

TEST(PartialTagSuffix, Lengths) {
  EXPECT_EQ(PartialTagSuffix("abc<tool", "<tool_call>"), 5u);
  EXPECT_EQ(PartialTagSuffix("abc", "<tool_call>"), 0u);
  EXPECT_EQ(PartialTagSuffix("<", "<think>"), 1u);
  EXPECT_EQ(PartialTagSuffix("", "<think>"), 0u);
}

}  // namespace
}  // namespace vtllm::server
