#include "tokenizer/post_processor.h"

#include <string>

namespace vtllm::tok {
namespace {

// ["<s>", 0] as used by RobertaProcessing / BertProcessing.
int32_t PairId(const Json& j, std::string_view path, const char* key) {
  const Json& v = Require(j, path, key);
  const std::string p = JoinPath(path, key);
  if (!v.is_array() || v.size() != 2 || !v[0].is_string()) {
    ThrowField(p, "expected [\"token\", id], got " + Describe(v));
  }
  return AsTokenId(v[1], p + "[1]");
}

}  // namespace

PostProcessor PostProcessor::FromJson(const Json& j, std::string_view path) {
  PostProcessor p;
  if (!j.is_null()) p.Parse(j, path);
  return p;
}

void PostProcessor::Parse(const Json& j, std::string_view path) {
  const std::string& type = RequireString(j, path, "type");
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const std::string p = JoinPath(path, "processors");
    const Json& list = Require(j, path, "processors");
    if (!list.is_array()) ThrowField(p, "expected an array, got " + Describe(list));
    for (size_t i = 0; i < list.size(); ++i) {
      // Each processor wraps the output of the previous one.
      PostProcessor inner;
      inner.Parse(list[i], p + "[" + std::to_string(i) + "]");
      prefix.insert(prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      suffix.insert(suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(PairId(j, path, "cls"));
    suffix.push_back(PairId(j, path, "sep"));
    return;
  }
  if (type != "TemplateProcessing") {
    ThrowField(JoinPath(path, "type"),
               "unsupported post_processor type \"" + type +
                   "\" (supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
                   "BertProcessing, Sequence)");
  }
  const std::string sp_path = JoinPath(path, "special_tokens");
  const Json* specials = Optional(j, path, "special_tokens");
  if (specials && !specials->is_object()) {
    ThrowField(sp_path, "expected an object, got " + Describe(*specials));
  }
  const std::string single_path = JoinPath(path, "single");
  const Json& single = Require(j, path, "single");
  if (!single.is_array()) ThrowField(single_path, "expected an array, got " + Describe(single));
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string ip = single_path + "[" + std::to_string(i) + "]";
    const Json& piece = single[i];
    if (const Json* seq = piece.is_object() ? Optional(piece, ip, "Sequence") : nullptr) {
      const std::string& which = RequireString(*seq, ip + ".Sequence", "id");
      if (which != "A" || seen_a) {
        ThrowField(ip + ".Sequence.id",
                   "unsupported sequence \"" + which + "\" in a single-sequence template");
      }
      seen_a = true;
      continue;
    }
    const Json* tok = piece.is_object() ? Optional(piece, ip, "SpecialToken") : nullptr;
    if (!tok) ThrowField(ip, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + Describe(piece));
    const std::string& name = RequireString(*tok, ip + ".SpecialToken", "id");
    auto it = specials ? specials->find(name) : Json::const_iterator{};
    if (!specials || it == specials->end()) {
      ThrowField(sp_path, "missing entry for template token \"" + name + "\"");
    }
    const std::string ep = sp_path + "[\"" + name + "\"]";
    const Json& ids = Require(*it, ep, "ids");
    if (!ids.is_array()) ThrowField(ep + ".ids", "expected an array, got " + Describe(ids));
    auto& dst = seen_a ? suffix : prefix;
    for (size_t k = 0; k < ids.size(); ++k) {
      dst.push_back(AsTokenId(ids[k], ep + ".ids[" + std::to_string(k) + "]"));
    }
  }
  if (!seen_a) ThrowField(single_path, "template has no {\"Sequence\": {\"id\": \"A\"}}");
}

}  // namespace vtllm::tok
