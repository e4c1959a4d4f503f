// Typed reads of request-body fields: each names the field and what was wrong with it in a
// 400 error, and treats an explicit null as absent (as vLLM's pydantic models do for optional
// fields).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vtllm::server {

using Json = nlohmann::ordered_json;

// Parses a request body: a JSON object, nested at most kMaxJsonDepth deep (deeper bodies are
// refused before parsing, so nothing later recurses without bound). 400 otherwise.
inline constexpr int kMaxJsonDepth = 64;
Json ParseBody(std::string_view body);

// The dump every response uses: invalid UTF-8 (never expected) is replaced, not thrown.
std::string Dump(const Json& j);

// Short description of a value for messages: its type and a truncated dump.
std::string Describe(const Json& v);

// body[name], or nullptr when absent or null.
const Json* Field(const Json& body, std::string_view name);

std::optional<bool> GetBool(const Json& body, std::string_view name);
std::optional<double> GetNumber(const Json& body, std::string_view name);
// Integers; a float with an integral value (2.0) is accepted, as pydantic does.
std::optional<int64_t> GetInt(const Json& body, std::string_view name);
std::optional<std::string> GetString(const Json& body, std::string_view name);
// A string, or a list of strings.
std::optional<std::vector<std::string>> GetStringOrList(const Json& body, std::string_view name);
std::optional<std::vector<int64_t>> GetIntList(const Json& body, std::string_view name);
// Requires an object when present.
const Json* GetObject(const Json& body, std::string_view name);

// An integer JSON value (not a field), or nullopt when `v` is no integer.
std::optional<int64_t> AsInt(const Json& v);

}  // namespace vtllm::server
