// /v1/chat/completions bodies: messages (roles system, developer, user, assistant, tool;
// string content or lists of text parts), tools and tool_choice, chat_template_kwargs,
// add_generation_prompt / continue_final_message, rendered through the model's template.
#include <set>

#include "server/error.h"
#include "server/protocol.h"

namespace vtllm::server {

namespace {

const std::set<std::string>& Roles() {
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  return roles;
}

// Content as the template sees it: a string (text parts joined by newlines, as vLLM's
// "string" content format does); null becomes "".
std::string ContentText(const Json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw BadRequest(param, "'" + param + "' must be a string or a list of content parts, got " + Describe(content));
  std::string text;
  bool first = true;
  for (const Json& part : content) {
    if (!part.is_object()) throw BadRequest(param, "each content part must be an object, got " + Describe(part));
    std::optional<std::string> type = GetString(part, "type");
    if (!type || (*type != "text" && *type != "input_text"))
      throw BadRequest(param, "content parts of type " + (type ? "\"" + *type + "\"" : std::string("(none)")) +
                                  " are not supported: this model takes text only.");
    std::optional<std::string> t = GetString(part, "text");
    if (!t) throw BadRequest(param, "a text content part needs 'text' (a string).");
    if (!first) text += "\n";
    text += *t;
    first = false;
  }
  return text;
}

// A message as the template sees it: the client's object with content flattened and tool-call
// arguments given as JSON text parsed into objects (as vLLM does before rendering).
Json TemplateMessage(const Json& m, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) throw BadRequest(param, "'" + param + "' must be an object, got " + Describe(m));
  auto role_it = m.find("role");
  if (role_it == m.end() || !role_it->is_string())
    throw BadRequest(param + ".role", "'" + param + ".role' must be a string.");
  const std::string role = role_it->get<std::string>();
  if (!Roles().count(role))
    throw BadRequest(param + ".role", "Unknown role \"" + role + "\": expected system, developer, user, assistant or tool.");
  Json out = m;
  out["content"] = ContentText(m.contains("content") ? m["content"] : Json(nullptr), index);
  if (const Json* calls = Field(m, "tool_calls")) {
    if (!calls->is_array()) throw BadRequest(param + ".tool_calls", "'tool_calls' must be a list, got " + Describe(*calls));
    Json fixed = Json::array();
    for (Json call : *calls) {
      if (!call.is_object()) throw BadRequest(param + ".tool_calls", "each tool call must be an object.");
      if (call.contains("function") && call["function"].is_object()) {
        Json& fn = call["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          Json args = Json::parse(fn["arguments"].get<std::string>(), nullptr, false);
          if (!args.is_discarded() && args.is_object()) fn["arguments"] = std::move(args);
        }
      }
      fixed.push_back(std::move(call));
    }
    out["tool_calls"] = std::move(fixed);
  }
  return out;
}

// Cuts `rendered` right after the final message's content, as transformers'
// continue_final_message does.
std::string ContinueFinal(const std::string& rendered, const std::string& content) {
  size_t at = rendered.rfind(content);
  size_t len = content.size();
  if (at == std::string::npos || content.empty()) {
    const size_t b = content.find_first_not_of(" \t\r\n");
    const size_t e = content.find_last_not_of(" \t\r\n");
    const std::string stripped = b == std::string::npos ? "" : content.substr(b, e - b + 1);
    at = stripped.empty() ? std::string::npos : rendered.rfind(stripped);
    len = stripped.size();
  }
  if (at == std::string::npos)
    throw BadRequest("continue_final_message",
                     "continue_final_message is set but the final message does not appear in the chat after applying the chat template.");
  return rendered.substr(0, at + len);
}

// The tools list, checked: each {"type": "function", "function": {"name": "..."}}; nullptr
// when absent or empty.
const Json* ToolsField(const Json& body) {
  const Json* t = Field(body, "tools");
  if (!t) return nullptr;
  if (!t->is_array()) throw BadRequest("tools", "'tools' must be a list, got " + Describe(*t));
  for (size_t i = 0; i < t->size(); ++i) {
    const Json& tool = (*t)[i];
    const std::string param = "tools[" + std::to_string(i) + "]";
    auto fn = tool.is_object() ? tool.find("function") : tool.end();
    if (!tool.is_object() || fn == tool.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      throw BadRequest(param, "'" + param + "' must be {\"type\": \"function\", \"function\": {\"name\": ...}}.");
  }
  return t->empty() ? nullptr : t;
}

}  // namespace

RenderedChat RenderChat(const Json& body, const ProtocolContext& ctx) {
  const Json* messages = Field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty())
    throw BadRequest("messages", "'messages' must be a non-empty list of messages.");
  if (!ctx.tokenizer || !ctx.chat_template)
    throw BadRequest("messages", "This model has no chat template: use /v1/completions.");
  Json msgs = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) msgs.push_back(TemplateMessage((*messages)[i], i));

  Json tools = nullptr;
  if (const Json* t = ToolsField(body)) tools = *t;
  Json kwargs = Json::object();
  if (const Json* k = GetObject(body, "chat_template_kwargs")) kwargs = *k;

  bool add_generation_prompt = GetBool(body, "add_generation_prompt").value_or(true);
  const bool continue_final = GetBool(body, "continue_final_message").value_or(false);
  if (continue_final && add_generation_prompt) {
    if (Field(body, "add_generation_prompt"))
      throw BadRequest("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    add_generation_prompt = false;
  }
  RenderedChat out;
  out.last_role = msgs.back()["role"].get<std::string>();
  out.last_content = msgs.back()["content"].get<std::string>();
  const ChatTemplate* tmpl = tools.is_null() || !ctx.tool_chat_template ? ctx.chat_template : ctx.tool_chat_template;
  try {
    out.text = tmpl->Render(msgs, add_generation_prompt, tools, kwargs);
  } catch (const ChatTemplateError& e) {
    throw BadRequest("messages", std::string("The chat template failed on these messages: ") + e.what());
  }
  if (continue_final) {
    if (out.last_role != "assistant")
      throw BadRequest("continue_final_message", "continue_final_message needs the last message to be the assistant's.");
    out.text = ContinueFinal(out.text, out.last_content);
  }
  return out;
}

ParsedRequest ParseChatRequest(const Json& body, const ProtocolContext& ctx) {
  ParsedRequest req;
  req.endpoint = Endpoint::kChat;
  req.model = ResolveModel(body, ctx);
  req.params = ctx.defaults;
  ParseSamplingFields(body, ctx, req);
  std::optional<int64_t> max_tokens = GetInt(body, "max_completion_tokens");
  const char* max_name = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = GetInt(body, "max_tokens");
    max_name = "max_tokens";
  }
  if (max_tokens) {
    if (*max_tokens < 1) throw BadRequest(max_name, std::string(max_name) + " must be at least 1, got " + std::to_string(*max_tokens) + ".");
    req.params.max_tokens = *max_tokens;
  }
  const bool logprobs = GetBool(body, "logprobs").value_or(false);
  if (auto top = GetInt(body, "top_logprobs")) {
    if (*top < 0) throw BadRequest("top_logprobs", "`top_logprobs` must be a positive value.");
    if (*top > ctx.max_logprobs)
      throw BadRequest("top_logprobs", "top_logprobs must be at most " + std::to_string(ctx.max_logprobs) + ", got " + std::to_string(*top) + ".");
    if (*top > 0 && !logprobs) throw BadRequest("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
    if (logprobs) req.params.logprobs = static_cast<int>(*top);
  } else if (logprobs) {
    req.params.logprobs = 0;
  }

  // Tool choice, with vLLM's defaults: "auto" when tools are given, "none" otherwise.
  const Json* tools = ToolsField(body);
  const bool have_tools = tools != nullptr;
  req.tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (const Json* tc = Field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "none") req.tool_choice = ToolChoice::kNone;
      else if (s == "auto") req.tool_choice = ToolChoice::kAuto;
      else if (s == "required") req.tool_choice = ToolChoice::kRequired;
      else throw BadRequest("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, got \"" + s + "\".");
    } else if (tc->is_object()) {
      const Json* fn = GetObject(*tc, "function");
      std::optional<std::string> name = fn ? GetString(*fn, "name") : std::nullopt;
      if (!name) throw BadRequest("tool_choice", "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}.");
      req.tool_choice = ToolChoice::kNamed;
      req.named_tool = *name;
    } else {
      throw BadRequest("tool_choice", "'tool_choice' must be a string or an object, got " + Describe(*tc));
    }
    if (req.tool_choice != ToolChoice::kNone && !have_tools)
      throw BadRequest("tool_choice", "When using `tool_choice`, `tools` must be set.");
  }
  if (req.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const Json& t : *tools)
      if (t["function"]["name"].get<std::string>() == req.named_tool)
        found = true;
    if (!found) throw BadRequest("tool_choice", "Tool \"" + req.named_tool + "\" named in 'tool_choice' is not in 'tools'.");
  }
  if (req.tool_choice == ToolChoice::kAuto && !(ctx.enable_auto_tool_choice && !ctx.tool_call_parser.empty()))
    throw BadRequest("tool_choice", "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  // required and named choices are forced by guided decoding, as vLLM does (no parser needed).
  if (tools) ApplyToolChoiceGrammar(*tools, req);
  req.guided_tools = req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed;
  req.parse_tools = req.tool_choice == ToolChoice::kAuto;

  RenderedChat chat = RenderChat(body, ctx);
  req.prompts.push_back(ctx.tokenizer->Encode(chat.text, GetBool(body, "add_special_tokens").value_or(false)));
  const bool add_generation_prompt =
      GetBool(body, "add_generation_prompt").value_or(true) && !GetBool(body, "continue_final_message").value_or(false);
  req.echo = GetBool(body, "echo").value_or(false);
  const std::string response_role = add_generation_prompt ? "assistant" : chat.last_role;
  if (req.echo && chat.last_role == response_role) req.echo_text = chat.last_content;
  // A constrained output is the value from its first token: no reasoning block before it.
  if (ctx.reasoning_parser == "qwen3" && !req.params.structured.enabled()) {
    req.parse_reasoning = true;
    const size_t open = chat.text.rfind("<think>");
    const size_t close = chat.text.rfind("</think>");
    req.prompt_opens_reasoning = open != std::string::npos && (close == std::string::npos || close < open);
  }
  req.prompt_texts.push_back(std::move(chat.text));
  CheckContextLength(req, ctx);
  return req;
}

}  // namespace vtllm::server
