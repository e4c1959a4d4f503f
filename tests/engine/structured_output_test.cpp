// The structured-output automaton byte by byte (against nlohmann::json's parser as the
// reference for "any JSON"), schema compilation errors, and the vocabulary masks against a
// brute-force walk of every token of the real Qwen3 vocabulary.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <random>
#include <regex>

#include "engine/request.h"
#include "engine/structured_output.h"
#include "structured_output_test.h"

namespace vtllm::engine {
namespace {

using so_test::Json;

// Feeds `text` byte by byte: the number of bytes accepted, and whether the value is complete.
struct Fed {
  size_t accepted = 0;
  bool complete = false;
};
Fed Feed(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  Fed f;
  for (char c : text) {
    if (!m.AcceptByte(static_cast<uint8_t>(c))) return f;
    ++f.accepted;
  }
  f.complete = m.IsComplete();
  return f;
}
bool Accepts(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  const Fed f = Feed(g, text);
  return f.accepted == text.size() && f.complete;
}

std::shared_ptr<const JsonGrammar> Schema(const std::string& s) { return JsonGrammar::FromSchema(s, "response_format"); }

TEST(StructuredOutput, AnyJsonAcceptsValidAndRefusesInvalidAtTheRightByte) {
  const auto g = JsonGrammar::AnyValue();
  for (const std::string ok :
       {"{}", "[]", "0", "-0.5e+3", "1E-7", "123", "true", "null", R"("a\"b\\c\/\b\f\n\r\t")", R"("\u00e9\uD83D\uDE00")",
        "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"", R"({"a": {"b": [true, false, null, -1.25]}})", "[1, [2, [3]]]",
        "{\n\"k\":\n1\n}", R"({"":""})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
    EXPECT_TRUE(Json::accept(ok)) << ok;  // the reference agrees
  }
  // text, bytes accepted before the refusal (text.size(): all bytes taken but incomplete)
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"01", 1},          {"-", 1},         {"1.", 2},        {"1e", 2},       {"1.e5", 2},
      {"[1,]", 3},        {"{,}", 1},       {"{\"a\" 1}", 5}, {"{\"a\":}", 5}, {"\"\\x\"", 2},
      {"\"\\udc00\"", 4}, {"\"\\ud83d x\"", 7}, {"\"\\ud83d\\u0041\"", 9}, {"\"\x01\"", 1}, {"\"\xc0\x80\"", 1},
      {"\"\xed\xa0\x80\"", 2}, {"\"\xe4\xb8\"", 3}, {"[1,  2]", 4},  {"{} ", 2},       {" {}", 0},
      {"tru", 3}, {"1e123", 4}, {"1234567890123456789012345", 24},         {"nul1", 3},      {"[1 2]", 3},     {"\"abc", 4}};
  for (const auto& [text, at] : bad) {
    const Fed f = Feed(g, text);
    EXPECT_FALSE(f.accepted == text.size() && f.complete) << text;
    EXPECT_EQ(f.accepted, at) << text;
  }
}

// Random compact JSON values and single-byte mutations of them: the automaton accepts exactly
// what nlohmann::json's parser accepts (mutations add no whitespace, and numbers stay short).
TEST(StructuredOutput, AnyJsonAgreesWithAParserOnMutatedValues) {
  std::mt19937 rng(7);
  auto value = [&](auto&& self, int depth) -> Json {
    switch (rng() % (depth > 3 ? 4 : 6)) {
      case 0: return Json(static_cast<int>(rng() % 2001) - 1000);
      case 1: return Json((static_cast<int>(rng() % 20001) - 10000) / 64.0);
      case 2: {
        static const char* pieces[] = {"s", "\xc3\xa9", "\"", "\\", "\xe4\xb8\xad", "/"};
        std::string str;
        for (unsigned i = rng() % 4; i > 0; --i) str += pieces[rng() % 6];
        return Json(str);
      }
      case 3: return rng() % 3 == 0 ? Json(nullptr) : Json(rng() % 2 == 0);
      case 4: {
        Json a = Json::array();
        for (unsigned i = rng() % 4; i > 0; --i) a.push_back(self(self, depth + 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (unsigned i = rng() % 4; i > 0; --i) o["k" + std::to_string(rng() % 5)] = self(self, depth + 1);
        return o;
      }
    }
  };
  const std::string alphabet = "{}[]\",:0123456789-+.eEtrufalsn\\u/bxA";
  const auto g = JsonGrammar::AnyValue();
  int rejected = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string text = value(value, 0).dump();
    ASSERT_TRUE(Accepts(g, text)) << text;
    for (int k = 0; k < 8; ++k) {
      std::string m = text;
      m[rng() % m.size()] = alphabet[rng() % alphabet.size()];
      // The grammar bounds exponents to two digits (the reference would overflow on some).
      if (std::regex_search(m, std::regex("[eE][+-]?[0-9][0-9][0-9]"))) continue;
      const bool want = Json::accept(m);
      EXPECT_EQ(Accepts(g, m), want) << m;
      rejected += !want;
    }
  }
  EXPECT_GT(rejected, 300);  // the mutations did make invalid JSON
}

TEST(StructuredOutput, SchemaObjectsFollowPropertiesRequiredAndAdditional) {
  const auto g = Schema(R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2}},
      "required": ["name"]})");
  EXPECT_TRUE(Accepts(g, R"({"name": "x"})"));
  EXPECT_TRUE(Accepts(g, R"({"age": 3, "name": "x", "tags": ["a", 3]})"));
  EXPECT_TRUE(Accepts(g, R"({"name":"x","tags":[]})"));
  EXPECT_FALSE(Accepts(g, R"({"age": 3})"));              // required name missing
  EXPECT_FALSE(Accepts(g, R"({"name": "x", "other": 1})"));  // no additional properties
  EXPECT_FALSE(Accepts(g, R"({"name": 1})"));
  EXPECT_FALSE(Accepts(g, R"({"name": "x", "age": 1.5})"));  // integer
  EXPECT_FALSE(Accepts(g, R"({"name": "x", "tags": ["c"]})"));
  EXPECT_FALSE(Accepts(g, R"({"name": "x", "tags": ["a", "b", "a"]})"));  // maxItems
  EXPECT_FALSE(Accepts(g, R"({"name": "x", "name": "y"})"));  // a key twice
  EXPECT_EQ(Feed(g, R"({"nam": 1})").accepted, 5u);  // refused at the quote after "nam"

  const auto open = Schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})");
  EXPECT_TRUE(Accepts(open, R"({"a": 1, "b": [null], "c\u0041": {}})"));
  EXPECT_FALSE(Accepts(open, R"({"a": "x"})"));
  const auto typed = Schema(R"({"type": "object", "additionalProperties": {"type": "boolean"}})");
  EXPECT_TRUE(Accepts(typed, R"({"x": true, "y": false})"));
  EXPECT_FALSE(Accepts(typed, R"({"x": 1})"));
}

TEST(StructuredOutput, SchemaUnionsEnumsConstsAndRefs) {
  const auto g = Schema(R"({"anyOf": [{"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]},
      {"type": "object", "properties": {"ab": {"type": ["string", "null"]}}, "required": ["ab"]},
      {"type": "number"}, {"enum": [1, 12, "x"]}]})");
  for (const std::string ok : {R"({"a": 1})", R"({"ab": null})", R"({"ab": "q"})", "-3.5", "12", "\"x\""})
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  for (const std::string bad : {R"({"a": 2})", R"({"ab": 1})", R"({"a": 1, "ab": null})", "\"y\"", "[]"})
    EXPECT_FALSE(Accepts(g, bad)) << bad;

  const auto tree = Schema(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Accepts(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(Accepts(tree, R"({"v": 1, "kids": [{"w": 2}]})"));
  const auto arr = Schema(R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2})");
  EXPECT_FALSE(Accepts(arr, "[true]"));
  EXPECT_TRUE(Accepts(arr, "[true, false]"));
}

TEST(StructuredOutput, UnsupportedOrBadSchemasNameTheKeywordAndField) {
  auto message = [](const std::string& schema) -> std::string {
    try {
      JsonGrammar::FromSchema(schema, "response_format.json_schema.schema");
    } catch (const RequestError& e) {
      EXPECT_EQ(e.param(), "response_format.json_schema.schema");
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(R"({"type": "string", "pattern": "a+"})").find("'pattern'"), std::string::npos);
  EXPECT_NE(message(R"({"type": "object", "properties": {"x": {"type": "string", "format": "date"}}})").find("/properties/x"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "strange"})").find("strange"), std::string::npos);
  EXPECT_NE(message(R"({"type": "object", "properties": {}, "required": ["q"]})").find("\"q\""), std::string::npos);
  EXPECT_NE(message(R"({"$ref": "#/$defs/none"})").find("$ref"), std::string::npos);
  EXPECT_NE(message("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"type": "array", "minItems": -1})").find("minItems"), std::string::npos);
}

// Every token of the real Qwen3 vocabulary through a fresh copy of the matcher: the trie walk's
// mask must equal it bit for bit.
class StructuredOutputMask : public ::testing::Test {
 protected:
  static const TokenVocabulary* Vocab() {
    static const TokenVocabulary* v = []() -> const TokenVocabulary* {
      const Tokenizer* tok = so_test::Qwen3Tokenizer();
      if (!tok) return nullptr;
      std::vector<std::string> bytes(tok->VocabSize());
      std::vector<bool> special(bytes.size(), false);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = tok->TokenBytes(static_cast<int32_t>(i));
      for (const auto& t : tok->added_tokens()) special[static_cast<size_t>(t.id)] = true;
      return new TokenVocabulary(bytes, special, {*tok->eos_token_id()}, static_cast<int64_t>(bytes.size()) + 64);
    }();
    return v;
  }

  static std::vector<uint32_t> BruteForce(const GrammarMatcher& m, const TokenVocabulary& v) {
    std::vector<uint32_t> mask(static_cast<size_t>(v.bitmask_words()), 0);
    for (int32_t t = 0; t < v.vocab_size(); ++t) {
      bool ok = false;
      if (v.eos_ids().count(t)) {
        ok = m.IsComplete();
      } else if (v.in_trie(t)) {
        GrammarMatcher copy = m;
        ok = copy.AcceptBytes(v.bytes(t));
      }
      if (ok) mask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
    }
    return mask;
  }
};

TEST_F(StructuredOutputMask, TrieWalkEqualsEveryTokenThroughAFreshMatcher) {
  const TokenVocabulary* v = Vocab();
  ASSERT_NE(v, nullptr);
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "count": {"type": "integer"}, "score": {"type": "number"}, "kind": {"enum": ["alpha", "beta"]},
      "list": {"type": "array", "items": {"type": "boolean"}}}, "required": ["name", "count"]})";
  // Prefixes that leave the matcher in different places: before the value, in a key, after a
  // colon, in a free string (plain, after a backslash, in a \u escape, inside a UTF-8
  // character), in numbers, in an enum, in an array, and after the value.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {schema, ""},
      {schema, "{"},
      {schema, "{\"na"},
      {schema, "{\"name\":"},
      {schema, "{\"name\": \"ab"},
      {schema, "{\"name\": \"ab\\"},
      {schema, "{\"name\": \"ab\\u00"},
      {schema, "{\"name\": \"\xe4\xb8"},
      {schema, "{\"name\": \"x\", \"count\": -1"},
      {schema, "{\"name\": \"x\", \"count\": 1, \"score\": 0.5e"},
      {schema, "{\"name\": \"x\", \"count\": 1, \"kind\": \"al"},
      {schema, "{\"name\": \"x\", \"count\": 1, \"list\": [true,"},
      {schema, "{\"name\": \"x\", \"count\": 1}"},
      {"{}", "[1, {\"k\": "},
      {"{\"type\": \"number\"}", "12"},
  };
  double total_ms = 0;
  for (const auto& [s, prefix] : cases) {
    GrammarMatcher m(JsonGrammar::FromSchema(s, "schema"));
    ASSERT_TRUE(m.AcceptBytes(prefix)) << prefix;
    std::vector<uint32_t> mask;
    const auto t0 = std::chrono::steady_clock::now();
    v->FillBitmask(m, mask);
    const auto t1 = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    total_ms += ms;
    const std::vector<uint32_t> want = BruteForce(m, *v);
    const double brute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    std::printf("[ mask ] %-40s %8.3f ms (brute force %7.1f ms)\n", ("'" + prefix + "'").c_str(), ms, brute_ms);
    size_t allowed = 0;
    for (uint32_t w : want) allowed += static_cast<size_t>(__builtin_popcount(w));
    EXPECT_EQ(mask, want) << "after '" << prefix << "' (" << allowed << " tokens allowed)";
    EXPECT_GT(allowed, 0u) << prefix;
  }
  std::printf("[ mask ] %zu states over %lld tokens (%zu trie nodes): %.3f ms per mask on average\n", cases.size(),
              static_cast<long long>(v->vocab_size()), v->num_trie_nodes(), total_ms / static_cast<double>(cases.size()));
}

// A walk through a whole generated value: at each step the mask is checked against the brute
// force and a random allowed token is taken, so the states are the ones generation reaches.
TEST_F(StructuredOutputMask, RandomWalksStayValidAndMatchTheBruteForce) {
  const TokenVocabulary* v = Vocab();
  ASSERT_NE(v, nullptr);
  const std::string schema = R"({"type": "object", "properties": {"q": {"type": "string"},
      "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "required": ["q", "n"]})";
  std::mt19937 rng(3);
  GrammarMatcher m(JsonGrammar::FromSchema(schema, "schema"));
  std::string text;
  std::vector<uint32_t> mask;
  for (int step = 0; step < 40 && !m.IsTerminated(); ++step) {
    v->FillBitmask(m, mask);
    if (step % 4 == 0) {
      ASSERT_EQ(mask, BruteForce(m, *v)) << "after '" << text << "'";
    }
    std::vector<int32_t> ok;
    for (int32_t t = 0; t < v->vocab_size(); ++t)
      if ((mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u) ok.push_back(t);
    ASSERT_FALSE(ok.empty()) << text;
    // Prefer short structural tokens half of the time so the walk gets out of the string.
    int32_t t = ok[rng() % ok.size()];
    if (rng() % 2 == 0)
      for (int32_t c : ok)
        if (v->bytes(c).size() == 1 && !std::isalnum(static_cast<unsigned char>(v->bytes(c)[0]))) t = c;
    if (v->eos_ids().count(t)) break;
    ASSERT_TRUE(m.AcceptBytes(v->bytes(t)));
    text += v->bytes(t);
  }
  if (m.IsComplete()) {
    EXPECT_TRUE(so_test::Validates(Json::parse(text), Json::parse(schema), Json::parse(schema))) << text;
  }
}

}  // namespace
}  // namespace vtllm::engine
