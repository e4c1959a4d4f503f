// JSON schema -> JsonGrammar nodes (the subset structured_output.h lists).
#include <map>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "engine/structured_output.h"

namespace vtllm::engine {

using Json = nlohmann::json;

JsonGrammar::JsonGrammar() {
  nodes_.resize(6);
  nodes_[kAny].kind = Kind::kUnion;
  nodes_[kAny].alts = {kAnyObject, kAnyArray, kAnyString, kAnyNumber, kAnyLiteral};
  nodes_[kAnyObject].kind = Kind::kObject;
  nodes_[kAnyObject].additional = kAny;
  nodes_[kAnyArray].kind = Kind::kArray;
  nodes_[kAnyArray].items = kAny;
  nodes_[kAnyString].kind = Kind::kString;
  nodes_[kAnyNumber].kind = Kind::kNumber;
  nodes_[kAnyLiteral].kind = Kind::kLiterals;
  nodes_[kAnyLiteral].literals = {"true", "false", "null"};
}

class SchemaCompiler {
 public:
  SchemaCompiler(JsonGrammar& g, const Json& root, std::string field) : g_(g), root_(root), field_(std::move(field)) {}

  int32_t Compile(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) Fail(path, "the schema `false` matches nothing");
      return JsonGrammar::kAny;
    }
    if (!s.is_object()) Fail(path, "a schema must be an object or a boolean, got " + std::string(s.type_name()));
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (!Known(k))
        Fail(path, "JSON schema keyword '" + k + "' is not supported (supported: type, properties, required, "
                   "additionalProperties, items, minItems, maxItems, enum, const, anyOf, oneOf, $ref, $defs)");
    }
    if (auto it = s.find("$ref"); it != s.end()) {
      if (s.size() > 1 && (s.contains("type") || s.contains("properties") || s.contains("anyOf")))
        Fail(path, "'$ref' beside other constraints is not supported");
      return Ref(*it, path);
    }
    if (auto it = s.find("const"); it != s.end()) return Literals({*it});
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) Fail(path + "/enum", "'enum' must be a non-empty list");
      return Literals(std::vector<Json>(it->begin(), it->end()), path + "/enum");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) Fail(path + "/" + key, std::string("'") + key + "' must be a non-empty list");
        std::vector<int32_t> alts;
        for (size_t i = 0; i < it->size(); ++i)
          alts.push_back(Compile((*it)[i], path + "/" + key + "/" + std::to_string(i)));
        return Union(std::move(alts));
      }
    }
    auto t = s.find("type");
    if (t == s.end()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        return Typed("object", s, path);
      if (s.contains("items")) return Typed("array", s, path);
      return JsonGrammar::kAny;
    }
    if (t->is_string()) return Typed(t->get<std::string>(), s, path);
    if (t->is_array() && !t->empty()) {
      std::vector<int32_t> alts;
      for (const Json& one : *t) {
        if (!one.is_string()) Fail(path + "/type", "'type' must be a string or a list of strings");
        alts.push_back(Typed(one.get<std::string>(), s, path));
      }
      return Union(std::move(alts));
    }
    Fail(path + "/type", "'type' must be a string or a non-empty list of strings");
  }

 private:
  [[noreturn]] void Fail(const std::string& path, const std::string& what) const {
    throw RequestError(field_, "Invalid JSON schema in '" + field_ + "'" + (path.empty() ? "" : " at " + path) + ": " +
                                   what + ".");
  }

  static bool Known(const std::string& k) {
    static const std::set<std::string> known = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
        "anyOf", "oneOf", "$ref", "$defs", "definitions",
        // annotations, ignored
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
        "writeOnly", "strict"};
    return known.count(k) > 0;
  }

  int32_t Add(JsonGrammar::Node n) {
    g_.nodes_.push_back(std::move(n));
    return static_cast<int32_t>(g_.nodes_.size() - 1);
  }

  int32_t Union(std::vector<int32_t> alts) {
    if (alts.size() == 1) return alts[0];
    JsonGrammar::Node n;
    n.kind = JsonGrammar::Kind::kUnion;
    n.alts = std::move(alts);
    return Add(std::move(n));
  }

  int32_t Literals(const std::vector<Json>& values, const std::string& path = "") {
    if (values.size() > 64) Fail(path, "an enum of more than 64 values is not supported");
    JsonGrammar::Node n;
    n.kind = JsonGrammar::Kind::kLiterals;
    for (const Json& v : values) n.literals.push_back(v.dump());  // compact, as the matcher takes it
    return Add(std::move(n));
  }

  int32_t Ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) Fail(path + "/$ref", "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    const Json* target = nullptr;
    if (r == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (r.rfind(p, 0) != 0) continue;
        const std::string name = r.substr(p.size());
        const std::string group = p.substr(2, p.size() - 3);
        if (root_.contains(group) && root_[group].is_object() && root_[group].contains(name))
          target = &root_[group][name];
      }
    }
    if (!target) Fail(path + "/$ref", "'$ref' \"" + r + "\" does not name '#' or an entry of $defs / definitions");
    // A placeholder union first, so recursive references resolve to it.
    JsonGrammar::Node placeholder;
    placeholder.kind = JsonGrammar::Kind::kUnion;
    const int32_t id = Add(std::move(placeholder));
    refs_[r] = id;
    const int32_t body = Compile(*target, r.substr(1));
    g_.nodes_[static_cast<size_t>(id)].alts = {body};
    return id;
  }

  int32_t Typed(const std::string& type, const Json& s, const std::string& path) {
    JsonGrammar::Node n;
    if (type == "string") return JsonGrammar::kAnyString;
    if (type == "number") return JsonGrammar::kAnyNumber;
    if (type == "integer") {
      n.kind = JsonGrammar::Kind::kInteger;
      return Add(std::move(n));
    }
    if (type == "boolean") return Literals({Json(true), Json(false)});
    if (type == "null") return Literals({Json(nullptr)});
    if (type == "array") {
      n.kind = JsonGrammar::Kind::kArray;
      n.items = JsonGrammar::kAny;
      if (auto it = s.find("items"); it != s.end()) n.items = Compile(*it, path + "/items");
      n.min_items = Count(s, "minItems", path, 0);
      n.max_items = Count(s, "maxItems", path, -1);
      if (n.max_items >= 0 && n.max_items < n.min_items) Fail(path, "maxItems is below minItems");
      return Add(std::move(n));
    }
    if (type == "object") {
      n.kind = JsonGrammar::Kind::kObject;
      const Json* props = nullptr;
      if (auto it = s.find("properties"); it != s.end()) {
        if (!it->is_object()) Fail(path + "/properties", "'properties' must be an object");
        props = &*it;
      }
      if (props && props->size() > 64) Fail(path + "/properties", "more than 64 properties are not supported");
      std::vector<std::pair<std::string, const Json*>> list;
      if (props)
        for (const auto& [k, v] : props->items()) list.emplace_back(k, &v);
      for (const auto& [k, v] : list) {
        const std::string quoted = Json(k).dump();
        n.prop_names.push_back(quoted.substr(1, quoted.size() - 2));
        n.prop_nodes.push_back(-1);
      }
      if (auto it = s.find("required"); it != s.end()) {
        if (!it->is_array()) Fail(path + "/required", "'required' must be a list of property names");
        for (const Json& r : *it) {
          size_t i = 0;
          while (i < list.size() && (!r.is_string() || list[i].first != r.get<std::string>())) ++i;
          if (i == list.size())
            Fail(path + "/required", "required property " + r.dump() + " is not among 'properties'");
          n.required |= uint64_t{1} << i;
        }
      }
      const bool has_props = !list.empty();
      n.additional = has_props ? -1 : JsonGrammar::kAny;
      if (auto it = s.find("additionalProperties"); it != s.end()) {
        if (it->is_boolean()) n.additional = it->get<bool>() ? JsonGrammar::kAny : -1;
        else n.additional = -2;  // compiled below
      }
      const int32_t id = Add(std::move(n));
      // Children after the node exists (their compilation may grow nodes_).
      for (size_t i = 0; i < list.size(); ++i) {
        const int32_t child = Compile(*list[i].second, path + "/properties/" + list[i].first);
        g_.nodes_[static_cast<size_t>(id)].prop_nodes[i] = child;
      }
      if (g_.nodes_[static_cast<size_t>(id)].additional == -2) {
        const int32_t child = Compile(s["additionalProperties"], path + "/additionalProperties");
        g_.nodes_[static_cast<size_t>(id)].additional = child;
      }
      return id;
    }
    Fail(path + "/type", "unknown type \"" + type + "\"");
  }

  int64_t Count(const Json& s, const char* key, const std::string& path, int64_t dflt) const {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      Fail(path + "/" + key, std::string("'") + key + "' must be a non-negative integer");
    return it->get<int64_t>();
  }

  JsonGrammar& g_;
  const Json& root_;
  std::string field_;
  std::map<std::string, int32_t> refs_;
};

std::shared_ptr<const JsonGrammar> JsonGrammar::FromSchema(const std::string& schema_json, const std::string& field) {
  Json schema = Json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) throw RequestError(field, "'" + field + "' is not valid JSON.");
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  SchemaCompiler c(*g, schema, field);
  g->root_ = c.Compile(schema, "");
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyObject() {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->root_ = kAnyObject;
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::AnyValue() { return std::shared_ptr<JsonGrammar>(new JsonGrammar()); }

}  // namespace vtllm::engine
