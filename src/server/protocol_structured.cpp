// Structured outputs in request bodies: response_format (json_object, json_schema), vLLM's
// structured_outputs {"json": ...} / {"json_object": true} and the older guided_json, on both
// endpoints; and the grammars that force tool_choice "required" and named tool choices.
#include "engine/structured_output.h"
#include "server/error.h"
#include "server/protocol.h"

namespace vtllm::server {

namespace {

using Kind = engine::StructuredOutputParams::Kind;

// A schema given as an object (or as JSON text, which vLLM also takes).
std::string SchemaText(const Json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    Json parsed = Json::parse(v.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_boolean())) return parsed.dump();
  }
  throw BadRequest(field, "'" + field + "' must be a JSON schema (an object), got " + Describe(v));
}

// Compiles the schema once here, so that a bad one is a 400 naming the field.
void Check(const engine::StructuredOutputParams& so) {
  if (so.kind != Kind::kJsonSchema) return;
  try {
    (void)engine::JsonGrammar::FromSchema(so.json_schema, so.field);
  } catch (const engine::RequestError& e) {
    throw BadRequest(e.param(), e.what());
  }
}

void Set(engine::SamplingParams& p, Kind kind, std::string schema, std::string field) {
  if (p.structured.enabled())
    throw BadRequest(field, "Only one kind of structured output may be given, but both '" + p.structured.field +
                                "' and '" + field + "' are set.");
  p.structured.kind = kind;
  p.structured.json_schema = std::move(schema);
  p.structured.field = std::move(field);
  Check(p.structured);
}

}  // namespace

void ParseStructuredOutputs(const Json& body, ParsedRequest& req) {
  engine::SamplingParams& p = req.params;
  if (const Json* rf = GetObject(body, "response_format")) {
    const std::string type = GetString(*rf, "type").value_or("text");
    if (type == "json_object") {
      Set(p, Kind::kJsonObject, "", "response_format");
    } else if (type == "json_schema") {
      const Json* js = GetObject(*rf, "json_schema");
      if (!js) throw BadRequest("response_format.json_schema", "response_format json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}.");
      const Json* schema = Field(*js, "schema");
      // OpenAI requires the schema; without one any JSON object is produced.
      if (!schema) Set(p, Kind::kJsonObject, "", "response_format.json_schema");
      else Set(p, Kind::kJsonSchema, SchemaText(*schema, "response_format.json_schema.schema"), "response_format.json_schema.schema");
    } else if (type != "text") {
      throw BadRequest("response_format.type", "response_format type must be \"text\", \"json_object\" or \"json_schema\", got \"" + type + "\".");
    }
  }
  if (const Json* so = GetObject(body, "structured_outputs")) {
    for (const auto& [key, value] : so->items()) {
      if (key == "json") {
        Set(p, Kind::kJsonSchema, SchemaText(value, "structured_outputs.json"), "structured_outputs.json");
      } else if (key == "json_object") {
        if (value.is_boolean() && value.get<bool>()) Set(p, Kind::kJsonObject, "", "structured_outputs.json_object");
      } else if (key == "regex" || key == "choice" || key == "grammar" || key == "structural_tag") {
        if (!value.is_null())
          throw BadRequest("structured_outputs." + key, "structured_outputs." + key + " is not supported: only 'json' and 'json_object' are.");
      }
    }
  }
  if (const Json* gj = Field(body, "guided_json")) {
    if (!gj->is_null()) Set(p, Kind::kJsonSchema, SchemaText(*gj, "guided_json"), "guided_json");
  }
  for (const char* key : {"guided_regex", "guided_choice", "guided_grammar"}) {
    const Json* f = Field(body, key);
    if (f && !f->is_null()) throw BadRequest(key, std::string(key) + " is not supported: only guided_json is.");
  }
}

void ApplyToolChoiceGrammar(const Json& tools, ParsedRequest& req) {
  if (req.tool_choice != ToolChoice::kNamed && req.tool_choice != ToolChoice::kRequired) return;
  if (req.params.structured.enabled())
    throw BadRequest(req.params.structured.field, "'" + req.params.structured.field +
                                                      "' cannot be combined with tool_choice \"required\" or a named tool choice.");
  auto parameters = [](const Json& fn) {
    auto it = fn.find("parameters");
    return it != fn.end() && !it->is_null() ? *it : Json{{"type", "object"}};
  };
  if (req.tool_choice == ToolChoice::kNamed) {
    for (size_t i = 0; i < tools.size(); ++i) {
      const Json& fn = tools[i]["function"];
      if (fn["name"].get<std::string>() != req.named_tool) continue;
      const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
      Set(req.params, Kind::kJsonSchema, SchemaText(parameters(fn), field), field);
      return;
    }
    return;
  }
  // required: [{"name": <a tool's name>, "parameters": <that tool's schema>}, ...], at least one.
  Json alts = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i]["function"];
    const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
    const Json params = Json::parse(SchemaText(parameters(fn), field));
    engine::StructuredOutputParams one{Kind::kJsonSchema, params.dump(), field};
    Check(one);  // the error names this tool's parameters
    alts.push_back({{"type", "object"},
                    {"properties", {{"name", {{"const", fn["name"]}}}, {"parameters", params}}},
                    {"required", {"name", "parameters"}}});
  }
  const Json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", alts}}}};
  Set(req.params, Kind::kJsonSchema, schema.dump(), "tools");
}

}  // namespace vtllm::server
