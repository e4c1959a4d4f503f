// LoadError: every defect found while reading a checkpoint (a safetensors header, an index,
// config.json, a quantization config, a missing or ill-shaped tensor). The message names the
// file and the tensor or field, and the actual values, so the user can act on it.
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "vt/error.h"

namespace vtllm::model {

class LoadError : public vt::Error {
 public:
  explicit LoadError(const std::string& what) : vt::Error(what) {}
};

// Throws LoadError(StrCat(parts...)).
template <typename... Args>
[[noreturn]] void ThrowLoadError(Args&&... parts) {
  throw LoadError(vt::StrCat(std::forward<Args>(parts)...));
}

// A short rendering of a JSON value for messages: its type and (truncated) text,
// e.g. `string "1024"`, `number 1.5`, `array [1,2]`, `null`.
std::string DescribeJson(const nlohmann::json& value);

// Reads and parses a JSON file; throws LoadError naming the file when it cannot be read or
// is not valid JSON (with the parser's byte position).
nlohmann::json ReadJsonFile(const std::string& path);

// Joins a directory and a file name with one '/'.
std::string JoinPath(const std::string& dir, const std::string& name);

bool FileExists(const std::string& path);

}  // namespace vtllm::model
