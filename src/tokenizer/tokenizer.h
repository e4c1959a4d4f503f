// Hugging Face tokenizer.json (byte-level BPE, as shipped with Qwen2/Qwen3 and Llama 3) plus the
// parts of tokenizer_config.json the engine needs (bos/eos tokens, the chat template).
//
// Encode gives the ids Hugging Face `tokenizers` gives for the same text; Decode gives its
// decode. Input text that is not valid UTF-8 is first decoded the way Python's
// `bytes.decode("utf-8", errors="replace")` does (each maximal ill-formed subpart becomes U+FFFD),
// since tokenizers itself only accepts valid strings.
//
// A Tokenizer is immutable after loading, cheap to copy (shared state) and safe to use from
// several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_error.h"

namespace vtllm {

struct DecodeOptions {
  bool skip_special_tokens = false;
  // transformers' post-processing that removes the space before punctuation and some
  // contractions (" ." -> ".", " n't" -> "n't", ...). tokenizers itself never does this;
  // transformers does it when tokenizer_config.json sets clean_up_tokenization_spaces.
  bool clean_up_tokenization_spaces = false;
};

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json.
  static Tokenizer FromDir(const std::string& dir);
  // `tokenizer_config_path` may be empty (no config).
  static Tokenizer FromFiles(const std::string& tokenizer_json_path,
                             const std::string& tokenizer_config_path = {});
  // From file contents; `tokenizer_config_json` may be empty.
  static Tokenizer FromJson(std::string_view tokenizer_json,
                            std::string_view tokenizer_config_json = {});

  // Token ids of `text`. With add_special_tokens the post-processor's tokens (e.g. Llama 3's
  // <|begin_of_text|> when tokenizer.json has a TemplateProcessing) are added.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = false) const;

  // Text of `ids`. Ids outside the vocabulary are skipped, as tokenizers does. Bytes that do not
  // form valid UTF-8 come out as U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options) const;

  // The bytes token `id` contributes to decoded text (before UTF-8 repair); empty if unknown.
  std::string_view TokenBytes(int32_t id) const;
  // True for added tokens marked "special" (dropped by skip_special_tokens).
  bool IsSpecial(int32_t id) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocabulary string of `id` (byte-level spelling, e.g. "Ġworld"), if it exists.
  std::optional<std::string> IdToToken(int32_t id) const;
  // One more than the largest token id (model vocabulary and added tokens).
  size_t VocabSize() const;

  struct AddedTokenInfo {
    int32_t id;
    std::string content;
    bool special, lstrip, rstrip, normalized, single_word;
  };
  const std::vector<AddedTokenInfo>& added_tokens() const;

  // From tokenizer_config.json (strings or {"content": ...} objects); nullopt when unset.
  const std::optional<std::string>& bos_token() const;
  const std::optional<std::string>& eos_token() const;
  const std::optional<std::string>& pad_token() const;
  const std::optional<std::string>& unk_token() const;
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;

  // The raw Jinja chat template ("default" one when the config has a named list); empty if none.
  const std::string& chat_template() const;
  // Named templates when the config gives a list of {"name", "template"} (e.g. "tool_use").
  const std::map<std::string, std::string>& chat_templates() const;
  bool clean_up_tokenization_spaces() const;
  // The whole tokenizer_config.json (an empty object when none was given).
  const nlohmann::json& config() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  static std::shared_ptr<Impl> Build(std::string_view tokenizer_json,
                                     std::string_view tokenizer_config_json);
  std::shared_ptr<const Impl> impl_;
};

// Applies transformers' clean_up_tokenization_spaces replacements to `text`.
std::string CleanUpTokenizationSpaces(std::string text);

// Streaming decode: feed ids one at a time and get the text they complete. Never returns a
// partial UTF-8 sequence; bytes of an incomplete character are held until the character is
// complete. The concatenation of all Push results and Finish() equals
// tokenizer.Decode(all_ids, skip_special_tokens) (without clean_up_tokenization_spaces).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Text completed by `id` (possibly empty).
  std::string Push(int32_t id);
  // Flushes held bytes; an unfinished character becomes U+FFFD, as in the full decode.
  std::string Finish();
  // Bytes held back waiting for the rest of a character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace vtllm
