// IncrementalDetokenizer: never emits broken UTF-8, and its output concatenates to the full
// decode.
#include <gtest/gtest.h>

#include <random>

#include "synthetic_tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace vtllm::test {
namespace {

// Id of the vocabulary entry for the single byte `b`.
int32_t ByteTokenId(const Tokenizer& t, unsigned b) {
  std::string s;
  AppendByteChar(b, s);
  const auto id = t.TokenToId(s);
  EXPECT_TRUE(id.has_value()) << b;
  return id.value_or(0);
}

// Streams `ids` and checks both properties; returns the number of Push calls.
size_t CheckStream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer d(t, skip);
  std::string all;
  for (const int32_t id : ids) {
    const std::string piece = d.Push(id);
    EXPECT_TRUE(tok::IsValidUtf8(piece)) << Escaped(piece);
    EXPECT_LE(d.pending_bytes(), 3u);
    all += piece;
  }
  const std::string tail = d.Finish();
  EXPECT_TRUE(tok::IsValidUtf8(tail));
  all += tail;
  EXPECT_EQ(all, t.Decode(ids, skip)) << IdsToString(ids);
  return ids.size();
}

TEST(IncrementalDetokenizer, CorpusMatchesFullDecode) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  const auto corpus = nlohmann::json::parse(ReadText(std::string(VTLLM_FIXTURES_DIR) +
                                                     "/tokenizer/peer_corpus.json"))
                          .get<std::vector<std::string>>();
  size_t pushes = 0;
  for (const auto& s : corpus) {
    const auto ids = t->Encode(s);
    pushes += CheckStream(*t, ids, false);
    pushes += CheckStream(*t, ids, true);
  }
  EXPECT_GT(pushes, 1000u);
}

TEST(IncrementalDetokenizer, SplitsMultibyteCharactersAcrossTokens) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  // Emoji with ZWJ encode to byte-fragment tokens (oracle: ..., 61804, 101, 378, 235, ...).
  const auto ids = t->Encode("👨\u200d👩\u200d👧 数学");
  IncrementalDetokenizer d(*t);
  std::vector<std::string> pieces;
  bool held_back = false;
  for (const int32_t id : ids) {
    pieces.push_back(d.Push(id));
    held_back |= d.pending_bytes() > 0;
  }
  EXPECT_TRUE(held_back) << "expected a token that ends inside a character";
  std::string all;
  for (const auto& p : pieces) all += p;
  all += d.Finish();
  EXPECT_EQ(all, "👨\u200d👩\u200d👧 数学");
}

TEST(IncrementalDetokenizer, RandomIdsIncludingInvalidUtf8) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  // Single-byte tokens give arbitrary byte soup (ill-formed and truncated sequences).
  std::vector<int32_t> byte_ids;
  for (unsigned b = 0; b < 256; ++b) byte_ids.push_back(ByteTokenId(*t, b));
  std::mt19937 rng(7);
  const int32_t vocab = static_cast<int32_t>(t->VocabSize());
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const unsigned r = rng() % 10;
      if (r < 6 && !byte_ids.empty()) {
        ids.push_back(byte_ids[rng() % byte_ids.size()]);
      } else if (r < 9) {
        ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
      } else {
        ids.push_back(151643 + static_cast<int32_t>(rng() % 26));  // added tokens
      }
    }
    CheckStream(*t, ids, round % 2 == 0);
  }
}

TEST(IncrementalDetokenizer, TruncatedCharacterAtEndBecomesReplacement) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  // "€" is E2 82 AC; stream the single-byte tokens of its first two bytes only.
  const std::vector<int32_t> two = {ByteTokenId(*t, 0xE2), ByteTokenId(*t, 0x82)};
  EXPECT_EQ(t->TokenBytes(two[0]), "\xe2");
  EXPECT_EQ(t->TokenBytes(two[1]), "\x82");
  IncrementalDetokenizer d(*t);
  EXPECT_EQ(d.Push(two[0]), "");
  EXPECT_EQ(d.Push(two[1]), "");
  EXPECT_EQ(d.Finish(), "\uFFFD");
  EXPECT_EQ(t->Decode(two), "\uFFFD");
}

}  // namespace
}  // namespace vtllm::test
