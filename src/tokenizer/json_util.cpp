#include "tokenizer/json_util.h"

namespace vtllm::tok {

void ThrowField(std::string_view path, std::string_view what) {
  throw TokenizerError("tokenizer.json: " + std::string(path) + ": " + std::string(what));
}

std::string Describe(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return std::string(v.type_name()) + " " + s;
}

std::string JoinPath(std::string_view path, std::string_view key) {
  std::string p(path);
  if (!p.empty()) p += '.';
  p += key;
  return p;
}

const Json& Require(const Json& obj, std::string_view path, const char* key) {
  if (!obj.is_object()) ThrowField(path, "expected an object, got " + Describe(obj));
  auto it = obj.find(key);
  if (it == obj.end()) ThrowField(JoinPath(path, key), "missing required field");
  return *it;
}

const Json* Optional(const Json& obj, std::string_view path, const char* key) {
  if (!obj.is_object()) ThrowField(path, "expected an object, got " + Describe(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const std::string& RequireString(const Json& obj, std::string_view path, const char* key) {
  const Json& v = Require(obj, path, key);
  if (!v.is_string()) ThrowField(JoinPath(path, key), "expected a string, got " + Describe(v));
  return v.get_ref<const std::string&>();
}

bool OptionalBool(const Json& obj, std::string_view path, const char* key, bool fallback) {
  const Json* v = Optional(obj, path, key);
  if (!v) return fallback;
  if (!v->is_boolean()) ThrowField(JoinPath(path, key), "expected a boolean, got " + Describe(*v));
  return v->get<bool>();
}

int32_t AsTokenId(const Json& v, std::string_view path) {
  if (!v.is_number_integer()) ThrowField(path, "expected a token id (integer), got " + Describe(v));
  const int64_t id = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(
                                                  v.get<uint64_t>(), uint64_t{1} << 40))
                                            : v.get<int64_t>();
  if (id < 0 || id > kMaxTokenId) {
    ThrowField(path, "token id " + std::to_string(id) + " is out of range [0, " +
                         std::to_string(kMaxTokenId) + "]");
  }
  return static_cast<int32_t>(id);
}

}  // namespace vtllm::tok
