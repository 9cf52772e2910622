#include "util/json_depth.h"
#include "server/api_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace inferscale::server {
namespace {

using nlohmann::json;

constexpr int64_t kMaxTokensLimit = 1 << 30;
constexpr size_t kMaxStopStrings = 16;

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
  throw bad_request(fmt::format("'{}': {} is not supported by this server", param, what), param, "unsupported");
}

// Features we refuse rather than ignore: a client that asks for them must not get a silent no.
void reject_unsupported(const JsonFields& f, ApiKind kind) {
  if (auto n = f.integer("n", 1, 128); n && *n != 1) f.fail("n", fmt::format("only n=1 is supported, got {}", *n));
  if (auto b = f.integer("best_of", 1, 128); b && *b != 1) unsupported("best_of", "best_of > 1");
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (auto p = f.number(key, -2.0, 2.0); p && *p != 0.0) unsupported(key, "a non-zero penalty");
  if (auto p = f.number("repetition_penalty", 0.0, 100.0); p && *p != 1.0) unsupported("repetition_penalty", "a repetition penalty");
  if (const json* lb = f.get("logit_bias"); lb && !(lb->is_object() && lb->empty())) unsupported("logit_bias", "logit_bias");
  for (const char* key : {"tools", "functions"})
    if (const json* t = f.get(key); t && !(t->is_array() && t->empty())) unsupported(key, "tool calling");
  if (const json* rf = f.get("response_format")) {
    if (!rf->is_object()) f.fail("response_format", "expected an object");
    if (rf->value("type", "text") != "text") unsupported("response_format", "a structured response format");
  }
  if (kind == ApiKind::kCompletion)
    if (auto s = f.string("suffix"); s && !s->empty()) unsupported("suffix", "suffix");
}

// logprobs / top_logprobs (chat), logprobs N (completion), echo, prompt_logprobs, return_token_ids;
// then what the engine must compute for them (SamplingParams::logprobs / prompt_logprobs).
void parse_scoring(const JsonFields& f, GenerateRequest& r) {
  if (r.kind == ApiKind::kChat) {
    const bool lp = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, kMaxLogprobs);
    if (top && *top > 0 && !lp) f.fail("top_logprobs", "needs \"logprobs\": true");
    if (lp) r.logprobs = static_cast<int32_t>(top.value_or(0));
    if (f.boolean("echo").value_or(false))
      f.fail("echo", "is a completions feature; to score a chat prompt use prompt_logprobs (with "
                     "continue_final_message to score an assistant answer)");
  } else {
    if (auto n = f.integer("logprobs", 0, kMaxLogprobs)) r.logprobs = static_cast<int32_t>(*n);
    r.echo = f.boolean("echo").value_or(false);
  }
  if (auto n = f.integer("prompt_logprobs", 0, kMaxLogprobs)) r.prompt_logprobs = static_cast<int32_t>(*n);
  r.return_token_ids = f.boolean("return_token_ids").value_or(false);

  SamplingParams& sp = r.sampling;
  if (sp.max_tokens == 0 && !r.echo && r.prompt_logprobs < 0)
    f.fail(r.kind == ApiKind::kChat && f.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
           "must be at least 1 (0 only scores the prompt: with echo or prompt_logprobs)");
  sp.logprobs = r.logprobs;
  // The prompt is scored for prompt_logprobs, for echo with logprobs (its top-N), and always when
  // nothing is generated (the engine's scoring-only request).
  sp.prompt_logprobs = std::max(r.prompt_logprobs, r.echo ? r.logprobs : -1);
  if (sp.max_tokens == 0) sp.prompt_logprobs = std::max(sp.prompt_logprobs, 0);
}

std::vector<std::string> parse_stop(const JsonFields& f) {
  const json* v = f.get("stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings) f.fail("stop", fmt::format("at most {} stop strings are allowed, got {}", kMaxStopStrings, v->size()));
    for (const json& s : *v) {
      if (!s.is_string()) f.fail("stop", fmt::format("expected strings, got {}", json_type_name(s)));
      out.push_back(s.get<std::string>());
    }
  } else {
    f.fail("stop", fmt::format("expected a string or an array of strings, got {}", json_type_name(*v)));
  }
  for (const std::string& s : out)
    if (s.empty()) f.fail("stop", "stop strings must not be empty");
  return out;
}

// The fields shared by both endpoints.
GenerateRequest parse_common(const json& body, ApiKind kind, const SamplingDefaults& defaults) {
  GenerateRequest r;
  r.kind = kind;
  const JsonFields f(body);
  reject_unsupported(f, r.kind);
  auto model = f.string("model");
  if (!model || model->empty()) f.fail("model", "is required (the name of a served model, see GET /v1/models)");
  r.model = *model;

  SamplingParams& sp = r.sampling;
  // 0 only scores the prompt (parse_scoring says when that is allowed).
  std::optional<int64_t> max_tokens = f.integer("max_tokens", 0, kMaxTokensLimit);
  if (r.kind == ApiKind::kChat)
    if (auto mct = f.integer("max_completion_tokens", 0, kMaxTokensLimit)) max_tokens = mct;  // the newer name wins
  if (max_tokens) {
    sp.max_tokens = static_cast<int32_t>(*max_tokens);
    r.max_tokens_given = true;
  }
  sp.temperature = defaults.temperature;
  sp.top_p = defaults.top_p;
  sp.top_k = defaults.top_k;
  sp.min_p = defaults.min_p;
  if (auto t = f.number("temperature", 0.0, 2.0)) sp.temperature = static_cast<float>(*t);
  if (auto top_p = f.number("top_p", 0.0, 1.0)) {
    if (*top_p <= 0.0) f.fail("top_p", "must be greater than 0 and at most 1");
    sp.top_p = static_cast<float>(*top_p);
  }
  if (auto top_k = f.integer("top_k", -1, std::numeric_limits<int32_t>::max())) sp.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);
  if (auto min_p = f.number("min_p", 0.0, 1.0)) sp.min_p = static_cast<float>(*min_p);
  if (auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    sp.seed = static_cast<uint64_t>(*seed);
  sp.stop = parse_stop(f);
  sp.ignore_eos = f.boolean("ignore_eos").value_or(false);

  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) f.fail("stream_options", fmt::format("expected an object, got {}", json_type_name(*so)));
    if (!r.stream) f.fail("stream_options", "is only allowed with \"stream\": true");
    r.include_usage = JsonFields(*so, "stream_options.").boolean("include_usage").value_or(false);
  }
  f.string("user");  // accepted (type-checked) and otherwise unused
  if (const json* mem = f.get("memory")) r.memory = parse_memory_spec(*mem);
  parse_scoring(f, r);
  return r;
}

std::string message_content(const json& content, size_t i) {
  const std::string param = fmt::format("messages[{}].content", i);
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw bad_request(fmt::format("'{}': expected a string or an array of content parts, got {}", param, json_type_name(content)), param);
  std::string text;
  for (const json& part : content) {
    if (!part.is_object()) throw bad_request(fmt::format("'{}': content parts must be objects", param), param);
    const JsonFields pf(part, param + "[].");
    const std::string type = pf.string("type").value_or("");
    if (type != "text") unsupported(param, fmt::format("content of type '{}' (only text)", type));
    auto t = pf.string("text");
    if (!t) pf.fail("text", "is required in a text content part");
    text += *t;
  }
  return text;
}

}  // namespace

json parse_json_body(const std::string& body) {
  if (json_deeper_than(body, kMaxJsonDepth))
    throw bad_request(fmt::format("the request body nests arrays and objects more than {} deep", kMaxJsonDepth), {},
                      "invalid_json");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad_request("the request body is not valid JSON", {}, "invalid_json");
  if (!j.is_object()) throw bad_request(fmt::format("the request body must be a JSON object, got {}", json_type_name(j)));
  return j;
}

GenerateRequest parse_chat_request(const json& body, const SamplingDefaults& defaults) {
  GenerateRequest r = parse_common(body, ApiKind::kChat, defaults);
  const JsonFields f(body);
  const json* msgs = f.get("messages");
  if (!msgs) f.fail("messages", "is required (a non-empty array of messages)");
  if (!msgs->is_array() || msgs->empty()) f.fail("messages", "must be a non-empty array of messages");
  if (msgs->size() > kMaxChatMessages)
    f.fail("messages", fmt::format("holds {} messages; at most {} are accepted", msgs->size(), kMaxChatMessages));
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string prefix = fmt::format("messages[{}].", i);
    if (!m.is_object()) throw bad_request(fmt::format("'messages[{}]' must be an object", i), fmt::format("messages[{}]", i));
    const JsonFields mf(m, prefix);
    auto role = mf.string("role");
    if (!role) mf.fail("role", "is required");
    if (*role == "developer") *role = "system";
    if (*role != "system" && *role != "user" && *role != "assistant")
      mf.fail("role", fmt::format("must be system, developer, user or assistant; got '{}'", *role));
    if (const json* tc = mf.get("tool_calls"); tc && !(tc->is_array() && tc->empty())) unsupported(prefix + "tool_calls", "tool calling");
    const json* content = mf.get("content");
    if (!content) mf.fail("content", "is required");
    r.messages.push_back(ChatMessage{*role, message_content(*content, i)});
  }
  ChatRenderOptions& cr = r.chat_render;
  cr.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  cr.continue_final_message = f.boolean("continue_final_message").value_or(false);
  if (cr.continue_final_message) {
    if (cr.add_generation_prompt)
      f.fail("continue_final_message", "cannot be combined with add_generation_prompt (send \"add_generation_prompt\": false)");
    if (r.messages.back().role != "assistant")
      throw bad_request("'messages': continue_final_message needs the last message to be the assistant's (the one to continue)",
                        "messages");
  }
  return r;
}

GenerateRequest parse_completion_request(const json& body, const SamplingDefaults& defaults) {
  GenerateRequest r = parse_common(body, ApiKind::kCompletion, defaults);
  const JsonFields f(body);
  const json* p = f.get("prompt");
  if (!p) f.fail("prompt", "is required (a string or an array of token ids)");
  // A batch of one ([\"text\"] or [[ids]]) is the same as its only element.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text.empty()) f.fail("prompt", "must not be empty");
  } else if (p->is_array()) {
    if (p->empty()) f.fail("prompt", "must not be empty");
    std::vector<int32_t> ids;
    for (const json& t : *p) {
      if (t.is_string() || t.is_array()) f.fail("prompt", "batched prompts are not supported: send one prompt per request");
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        f.fail("prompt", fmt::format("token ids must be non-negative integers, got {}", t.dump()));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    r.prompt_ids = std::move(ids);
  } else {
    f.fail("prompt", fmt::format("expected a string or an array of token ids, got {}", json_type_name(*p)));
  }
  return r;
}

}  // namespace inferscale::server
