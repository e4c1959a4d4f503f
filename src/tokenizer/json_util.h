// Typed access to tokenizer.json fields with errors that name the JSON path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_error.h"

namespace vtllm::tok {

using Json = nlohmann::json;

[[noreturn]] void ThrowField(std::string_view path, std::string_view what);

// Short description of a JSON value for error messages (type and a truncated dump).
std::string Describe(const Json& v);

// Member `key` of object `obj` (at JSON path `path`); throws if `obj` is not an object or lacks it.
const Json& Require(const Json& obj, std::string_view path, const char* key);
// Member `key`, or nullptr when absent or null.
const Json* Optional(const Json& obj, std::string_view path, const char* key);

const std::string& RequireString(const Json& obj, std::string_view path, const char* key);
bool OptionalBool(const Json& obj, std::string_view path, const char* key, bool fallback);
int32_t AsTokenId(const Json& v, std::string_view path);

// Largest token id accepted; keeps the id tables bounded for hostile files. Real vocabularies
// stay far below (Llama 3: 128k, Qwen3: 152k, Gemma: 262k).
inline constexpr int32_t kMaxTokenId = (1 << 22) - 1;

std::string JoinPath(std::string_view path, std::string_view key);

}  // namespace vtllm::tok
