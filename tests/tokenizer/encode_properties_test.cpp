// Properties of Encode that need no oracle: round trips, very long inputs, thread safety.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer_test_util.h"

namespace vtllm::test {
namespace {

TEST(EncodeProperties, LongInputsRoundTrip) {
  for (const Tokenizer* t : {Qwen3(), Llama3()}) {
    ASSERT_NE(t, nullptr);
    const std::vector<std::string> inputs = {
        std::string(1 << 20, 'a'), std::string(1 << 20, ' '), std::string(300000, '\n'),
        [] { std::string s; for (int i = 0; i < 100000; ++i) s += "中"; return s; }(),
        [] { std::string s; for (int i = 0; i < 50000; ++i) s += " 12345"; return s; }(),
    };
    for (const auto& s : inputs) {
      const auto ids = t->Encode(s);
      EXPECT_FALSE(ids.empty());
      EXPECT_EQ(t->Decode(ids), s) << s.size();
    }
  }
}

TEST(EncodeProperties, ConcurrentEncodesAgree) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  const auto corpus = nlohmann::json::parse(ReadText(std::string(VTLLM_FIXTURES_DIR) +
                                                     "/tokenizer/peer_corpus.json"))
                          .get<std::vector<std::string>>();
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : corpus) want.push_back(t->Encode(s));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t i = 0; i < corpus.size(); ++i) bad[k] += t->Encode(corpus[i]) != want[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(bad[k], 0);
}

TEST(EncodeProperties, EmptyAndTinyInputs) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->Encode("").empty());
  EXPECT_EQ(t->Decode(std::vector<int32_t>{}), "");
  EXPECT_EQ(t->Decode(t->Encode(std::string("\0", 1))), std::string("\0", 1));
}

}  // namespace
}  // namespace vtllm::test
