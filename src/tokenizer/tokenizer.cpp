#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/string_table.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/utf8.h"

namespace vtllm {

using tok::Json;

struct Tokenizer::Impl {
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  std::unique_ptr<tok::BpeModel> model;
  tok::PostProcessor post_processor;

  std::vector<tok::AddedToken> added;             // as in the file
  std::vector<tok::AddedToken> added_normalized;  // normalized=true tokens, content normalized
  tok::AddedTokenMatcher raw_matcher;             // normalized=false tokens, on the raw text
  tok::AddedTokenMatcher normalized_matcher;      // normalized=true tokens, on normalized text
  std::vector<AddedTokenInfo> added_info;

  // Id tables: token string and decoded bytes of each id, packed.
  std::string token_blob, bytes_blob;
  std::vector<uint32_t> token_off, bytes_off;  // size VocabSize()+1
  std::vector<uint8_t> flags;                  // kExists | kSpecial
  tok::StringIdTable added_to_id;  // added tokens; looked up before the model's vocabulary

  tok::TokenizerConfig config;

  static constexpr uint8_t kExists = 1, kSpecial = 2;

  void EncodeText(std::string_view text, std::vector<int32_t>& out) const;
  void BuildIdTables(const std::vector<std::pair<std::string_view, int32_t>>& vocab);
};

namespace {

std::string ReadFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TokenizerError(std::string("cannot open ") + what + " \"" + path + "\"");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw TokenizerError(std::string("cannot read ") + what + " \"" + path + "\"");
  return ss.str();
}

Json ParseJson(std::string_view text, const char* file) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw TokenizerError(std::string(file) + ": invalid JSON: " + e.what());
  }
}

// The decoder must turn byte-level characters back into bytes.
void CheckDecoder(const Json* j) {
  if (!j) {
    tok::ThrowField("decoder", "missing (null); byte-level BPE needs a ByteLevel decoder");
  }
  const std::string& type = tok::RequireString(*j, "decoder", "type");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const Json& list = tok::Require(*j, "decoder", "decoders");
    if (!list.is_array()) tok::ThrowField("decoder.decoders", "expected an array, got " + tok::Describe(list));
    bool byte_level = false;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = "decoder.decoders[" + std::to_string(i) + "]";
      const std::string& t = tok::RequireString(list[i], p, "type");
      if (t != "ByteLevel") {
        tok::ThrowField(p + ".type", "unsupported decoder type \"" + t + "\" (supported: ByteLevel)");
      }
      byte_level = true;
    }
    if (byte_level) return;
  }
  tok::ThrowField("decoder.type", "unsupported decoder type \"" + type +
                                      "\" (supported: ByteLevel, Sequence of ByteLevel)");
}

tok::AddedToken ParseAddedToken(const Json& j, const std::string& path) {
  tok::AddedToken t;
  t.id = tok::AsTokenId(tok::Require(j, path, "id"), path + ".id");
  t.content = tok::RequireString(j, path, "content");
  t.single_word = tok::OptionalBool(j, path, "single_word", false);
  t.lstrip = tok::OptionalBool(j, path, "lstrip", false);
  t.rstrip = tok::OptionalBool(j, path, "rstrip", false);
  t.normalized = tok::OptionalBool(j, path, "normalized", true);
  t.special = tok::OptionalBool(j, path, "special", false);
  return t;
}

}  // namespace

void Tokenizer::Impl::BuildIdTables(const std::vector<std::pair<std::string_view, int32_t>>& vocab) {
  int32_t max_id = -1;
  for (const auto& [s, id] : vocab) max_id = std::max(max_id, id);
  for (const auto& t : added) max_id = std::max(max_id, t.id);
  const size_t n = static_cast<size_t>(max_id + 1);
  // Which entry names each id; added tokens override the model's entry.
  std::vector<int32_t> entry(n, -1);
  for (size_t k = 0; k < vocab.size(); ++k) entry[vocab[k].second] = static_cast<int32_t>(k);
  for (size_t k = 0; k < added.size(); ++k) {
    entry[added[k].id] = static_cast<int32_t>(vocab.size() + k);
  }
  token_off.assign(n + 1, 0);
  bytes_off.assign(n + 1, 0);
  flags.assign(n, 0);
  for (size_t id = 0; id < n; ++id) {
    token_off[id] = static_cast<uint32_t>(token_blob.size());
    bytes_off[id] = static_cast<uint32_t>(bytes_blob.size());
    const int32_t e = entry[id];
    if (e < 0) continue;
    const bool is_added = static_cast<size_t>(e) >= vocab.size();
    const std::string_view s = is_added ? std::string_view(added[e - vocab.size()].content) : vocab[e].first;
    flags[id] = kExists | (is_added && added[e - vocab.size()].special ? kSpecial : 0);
    token_blob.append(s);
    // ByteLevel decoding; a token with characters outside the byte map contributes its UTF-8.
    if (!tok::ByteLevelDecode(s, bytes_blob)) bytes_blob.append(s);
  }
  token_off[n] = static_cast<uint32_t>(token_blob.size());
  bytes_off[n] = static_cast<uint32_t>(bytes_blob.size());

  for (const auto& t : added) added_to_id.Put(t.content, t.id);
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::FromDir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::exists(d / "tokenizer.json", ec)) {
    throw TokenizerError("no tokenizer.json in \"" + dir + "\"");
  }
  const fs::path cfg = d / "tokenizer_config.json";
  const std::string tj = ReadFile((d / "tokenizer.json").string(), "tokenizer.json");
  const std::string tc =
      fs::exists(cfg, ec) ? ReadFile(cfg.string(), "tokenizer_config.json") : std::string();
  std::shared_ptr<Impl> impl = Build(tj, tc);
  // transformers >= 4.43 may keep the template in its own file.
  const fs::path jinja = d / "chat_template.jinja";
  if (impl->config.chat_template.empty() && fs::exists(jinja, ec)) {
    impl->config.chat_template = ReadFile(jinja.string(), "chat template");
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::FromFiles(const std::string& tokenizer_json_path,
                               const std::string& tokenizer_config_path) {
  const std::string tj = ReadFile(tokenizer_json_path, "tokenizer.json");
  const std::string tc =
      tokenizer_config_path.empty() ? std::string() : ReadFile(tokenizer_config_path, "tokenizer_config.json");
  if (!tokenizer_config_path.empty() && tc.empty()) {
    throw TokenizerError("tokenizer_config.json \"" + tokenizer_config_path + "\" is empty");
  }
  return FromJson(tj, tc);
}

Tokenizer Tokenizer::FromJson(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  return Tokenizer(Build(tokenizer_json, tokenizer_config_json));
}

std::shared_ptr<Tokenizer::Impl> Tokenizer::Build(std::string_view tokenizer_json,
                                                  std::string_view tokenizer_config_json) {
  auto impl = std::make_shared<Impl>();
  {
    const Json root = ParseJson(tokenizer_json, "tokenizer.json");
    if (!root.is_object()) tok::ThrowField("(root)", "expected an object, got " + tok::Describe(root));

    const Json& model = tok::Require(root, "", "model");
    const std::string& type = tok::RequireString(model, "model", "type");
    if (type != "BPE") {
      tok::ThrowField("model.type", "unsupported model type \"" + type + "\" (supported: BPE)");
    }
    static const Json kNull;
    auto member = [&](const char* key) -> const Json& {
      const Json* j = tok::Optional(root, "", key);
      return j ? *j : kNull;
    };
    impl->normalizer = tok::Normalizer::FromJson(member("normalizer"), "normalizer");
    impl->pre_tokenizer = tok::PreTokenizer::FromJson(member("pre_tokenizer"), "pre_tokenizer");
    if (!impl->pre_tokenizer.ends_with_byte_level()) {
      tok::ThrowField("pre_tokenizer",
                      "BPE without a final ByteLevel pre-tokenizer is not supported (only "
                      "byte-level BPE is)");
    }
    impl->post_processor = tok::PostProcessor::FromJson(member("post_processor"), "post_processor");
    CheckDecoder(tok::Optional(root, "", "decoder"));

    std::vector<std::pair<std::string_view, int32_t>> vocab;
    impl->model = tok::BpeModel::FromJson(model, "model", vocab);

    if (const Json* list = tok::Optional(root, "", "added_tokens")) {
      if (!list->is_array()) tok::ThrowField("added_tokens", "expected an array, got " + tok::Describe(*list));
      for (size_t i = 0; i < list->size(); ++i) {
        impl->added.push_back(ParseAddedToken((*list)[i], "added_tokens[" + std::to_string(i) + "]"));
      }
    }
    impl->BuildIdTables(vocab);
  }

  // Added-token matchers: special tokens first, then the others, as tokenizers orders them.
  std::vector<const tok::AddedToken*> raw;
  impl->added_normalized.reserve(impl->added.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& t : impl->added) {
      if (t.special != (pass == 0)) continue;
      if (!t.normalized) {
        raw.push_back(&t);
      } else {
        tok::AddedToken n = t;
        std::string buf;
        if (tok::IsValidUtf8(t.content)) n.content = std::string(impl->normalizer.Apply(t.content, buf));
        impl->added_normalized.push_back(std::move(n));
      }
    }
  }
  std::vector<const tok::AddedToken*> normalized;
  for (const auto& t : impl->added_normalized) normalized.push_back(&t);
  impl->raw_matcher.Build(raw);
  impl->normalized_matcher.Build(normalized);
  for (const auto& t : impl->added) {
    impl->added_info.push_back({t.id, t.content, t.special, t.lstrip, t.rstrip, t.normalized, t.single_word});
  }

  if (!tokenizer_config_json.empty()) {
    impl->config = tok::TokenizerConfig::FromJson(tokenizer_config_json);
  }
  return impl;
}

void Tokenizer::Impl::EncodeText(std::string_view text, std::vector<int32_t>& out) const {
  thread_local tok::PreTokenizeScratch scratch;
  std::vector<tok::AddedTokenMatcher::Segment> raw_list, norm_segments;
  std::string normalized_buf;
  raw_matcher.Split(text, raw_list);
  for (const auto& seg : raw_list) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    const std::string_view norm = normalizer.Apply(seg.text, normalized_buf);
    norm_segments.clear();
    normalized_matcher.Split(norm, norm_segments);
    for (const auto& s2 : norm_segments) {
      if (s2.id >= 0) {
        out.push_back(s2.id);
        continue;
      }
      pre_tokenizer.Run(s2.text, scratch);
      for (const std::string_view w : scratch.words) model->Encode(w, out);
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!tok::IsValidUtf8(text)) {
    tok::AppendUtf8Lossy(text, repaired);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) {
    ids.insert(ids.end(), impl_->post_processor.prefix.begin(), impl_->post_processor.prefix.end());
  }
  impl_->EncodeText(text, ids);
  if (add_special_tokens) {
    ids.insert(ids.end(), impl_->post_processor.suffix.begin(), impl_->post_processor.suffix.end());
  }
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  DecodeOptions o;
  o.skip_special_tokens = skip_special_tokens;
  return Decode(ids, o);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (options.skip_special_tokens && IsSpecial(id)) continue;
    bytes.append(TokenBytes(id));
  }
  std::string text;
  if (tok::IsValidUtf8(bytes)) {
    text = std::move(bytes);
  } else {
    tok::AppendUtf8Lossy(bytes, text);
  }
  if (options.clean_up_tokenization_spaces) text = CleanUpTokenizationSpaces(std::move(text));
  return text;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->flags.size()) return {};
  return std::string_view(impl_->bytes_blob)
      .substr(impl_->bytes_off[id], impl_->bytes_off[id + 1] - impl_->bytes_off[id]);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() &&
         (impl_->flags[id] & Impl::kSpecial);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const int32_t* id = impl_->added_to_id.Find(token)) return *id;
  if (const int32_t* id = impl_->model->vocab().Find(token)) return *id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->flags.size() || !(impl_->flags[id] & Impl::kExists)) {
    return std::nullopt;
  }
  return impl_->token_blob.substr(impl_->token_off[id], impl_->token_off[id + 1] - impl_->token_off[id]);
}

size_t Tokenizer::VocabSize() const { return impl_->flags.size(); }

const std::vector<Tokenizer::AddedTokenInfo>& Tokenizer::added_tokens() const { return impl_->added_info; }

const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->config.bos_token; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->config.eos_token; }
const std::optional<std::string>& Tokenizer::pad_token() const { return impl_->config.pad_token; }
const std::optional<std::string>& Tokenizer::unk_token() const { return impl_->config.unk_token; }

std::optional<int32_t> Tokenizer::bos_token_id() const {
  return bos_token() ? TokenToId(*bos_token()) : std::nullopt;
}
std::optional<int32_t> Tokenizer::eos_token_id() const {
  return eos_token() ? TokenToId(*eos_token()) : std::nullopt;
}
std::optional<int32_t> Tokenizer::pad_token_id() const {
  return pad_token() ? TokenToId(*pad_token()) : std::nullopt;
}

const std::string& Tokenizer::chat_template() const { return impl_->config.chat_template; }
const std::map<std::string, std::string>& Tokenizer::chat_templates() const {
  return impl_->config.chat_templates;
}
bool Tokenizer::clean_up_tokenization_spaces() const {
  return impl_->config.clean_up_tokenization_spaces;
}
const nlohmann::json& Tokenizer::config() const { return impl_->config.raw; }

std::string CleanUpTokenizationSpaces(std::string text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t pos = 0;
    while (true) {
      const size_t hit = text.find(from, pos);
      if (hit == std::string::npos) break;
      out.append(text, pos, hit - pos);
      out.append(to);
      pos = hit + from.size();
    }
    if (pos == 0) continue;
    out.append(text, pos, std::string::npos);
    text = std::move(out);
  }
  return text;
}

}  // namespace vtllm
