#include "server/fields.h"

#include <cmath>

#include "server/error.h"

namespace vtllm::server {

namespace {
std::string Quote(std::string_view name) { return "'" + std::string(name) + "'"; }

[[noreturn]] void TypeError(std::string_view name, const char* want, const Json& got) {
  throw BadRequest(std::string(name), Quote(name) + " must be " + want + ", got " + Describe(got));
}

// Depth of the deepest array/object in `body`, stopping early once it exceeds `limit`.
// Strings are skipped with their escapes so brackets inside them do not count.
int NestingDepth(std::string_view body, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}
}  // namespace

Json ParseBody(std::string_view body) {
  if (NestingDepth(body, kMaxJsonDepth) > kMaxJsonDepth)
    throw BadRequest("", "The request body is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep.");
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    throw BadRequest("", std::string("The request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw BadRequest("", "The request body must be a JSON object, got " + Describe(j));
  return j;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Describe(const Json& v) {
  std::string d = Dump(v);
  if (d.size() > 60) d = d.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + d;
}

const Json* Field(const Json& body, std::string_view name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> GetBool(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) TypeError(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> GetNumber(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) TypeError(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d)) TypeError(name, "a finite number", *v);
  return d;
}

std::optional<int64_t> AsInt(const Json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<int64_t> GetInt(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (!v) return std::nullopt;
  std::optional<int64_t> i = AsInt(*v);
  if (!i) TypeError(name, "an integer", *v);
  return i;
}

std::optional<std::string> GetString(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) TypeError(name, "a string", *v);
  return v->get<std::string>();
}

std::optional<std::vector<std::string>> GetStringOrList(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) TypeError(name, "a string or a list of strings", *v);
  std::vector<std::string> out;
  for (const Json& e : *v) {
    if (!e.is_string()) TypeError(name, "a string or a list of strings", *v);
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int64_t>> GetIntList(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_array()) TypeError(name, "a list of integers", *v);
  std::vector<int64_t> out;
  for (const Json& e : *v) {
    std::optional<int64_t> i = AsInt(e);
    if (!i) TypeError(name, "a list of integers", *v);
    out.push_back(*i);
  }
  return out;
}

const Json* GetObject(const Json& body, std::string_view name) {
  const Json* v = Field(body, name);
  if (v && !v->is_object()) TypeError(name, "an object", *v);
  return v;
}

}  // namespace vtllm::server
