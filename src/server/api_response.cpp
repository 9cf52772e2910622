#include "server/api_response.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

namespace inferscale::server {
namespace {

using nlohmann::json;

// Generated text is valid UTF-8 by construction (IncrementalDecoder); replace rather than throw
// should a tokenizer ever break that.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}, {"injected_tokens", u.injected_tokens}}}};
}

json memory_json(const MemoryReport& r) {
  json facts = json::array();
  for (const MemoryReport::PlacedFact& f : r.facts) facts.push_back({{"id", f.id}, {"score", f.score}, {"text", f.text}});
  json j = {{"mode", memory_mode_name(r.mode)}, {"facts", std::move(facts)}, {"injected_tokens", r.injected_tokens},
            {"recomputed_tokens", r.recomputed_tokens}, {"encoded", r.encoded}, {"loaded", r.loaded}, {"retrieve_ms", r.retrieve_ms}, {"kv_ms", r.kv_ms}};
  if (!r.fallback.empty()) j["fallback"] = r.fallback;
  if (r.stored) j["stored"] = *r.stored;
  return j;
}

json base(const ResponseMeta& m, bool chunk) {
  const char* object = m.kind == ApiKind::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

json finish_json(FinishReason r) { return r == FinishReason::kNone ? json(nullptr) : json(finish_reason_text(r)); }

// Merges `extra`'s fields into the choice and the response / chunk object.
void merge(json& top, json& choice, const ChoiceFields* extra) {
  if (!extra) return;
  for (auto it = extra->choice.begin(); it != extra->choice.end(); ++it) choice[it.key()] = it.value();
  for (auto it = extra->top.begin(); it != extra->top.end(); ++it) top[it.key()] = it.value();
}

// A streaming chunk with one choice; `delta_or_text` is the chat delta or the completion text.
// `memory`: the chunk's "memory" object (null: none).
std::string choice_chunk(const ResponseMeta& m, json choice, bool include_usage, json memory = nullptr,
                         const ChoiceFields* extra = nullptr) {
  json j = base(m, true);
  choice["index"] = 0;
  choice["logprobs"] = nullptr;
  merge(j, choice, extra);
  j["choices"] = json::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  if (!memory.is_null()) j["memory"] = std::move(memory);
  return "data: " + dump(j) + "\n\n";
}

}  // namespace

std::string new_response_id(ApiKind kind) {
  static const uint64_t salt = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  const uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  return fmt::format("{}-{:016x}{:08x}", kind == ApiKind::kChat ? "chatcmpl" : "cmpl", salt, n);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string finish_reason_text(FinishReason r) { return finish_reason_name(r); }

std::string response_body(const ResponseMeta& m, const std::string& text, FinishReason finish, const Usage& u,
                          const MemoryReport* memory, const ChoiceFields* extra) {
  json j = base(m, false);
  json choice = {{"index", 0}, {"finish_reason", finish_json(finish)}, {"logprobs", nullptr}};
  const std::string all = extra ? extra->echo + text : text;
  if (m.kind == ApiKind::kChat) choice["message"] = {{"role", "assistant"}, {"content", all}};
  else choice["text"] = all;
  merge(j, choice, extra);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(u);
  if (memory) j["memory"] = memory_json(*memory);
  return dump(j);
}

std::string sse_first_chunk(const ResponseMeta& m, bool include_usage, const MemoryReport* memory, const ChoiceFields* extra) {
  json choice = m.kind == ApiKind::kChat ? json{{"delta", {{"role", "assistant"}, {"content", ""}}}} : json{{"text", ""}};
  choice["finish_reason"] = nullptr;
  return choice_chunk(m, std::move(choice), include_usage, memory ? memory_json(*memory) : json(), extra);
}

std::string sse_text_chunk(const ResponseMeta& m, const std::string& text, bool include_usage, const ChoiceFields* extra) {
  const std::string all = extra ? extra->echo + text : text;
  json choice = m.kind == ApiKind::kChat ? json{{"delta", {{"content", all}}}} : json{{"text", all}};
  choice["finish_reason"] = nullptr;
  return choice_chunk(m, std::move(choice), include_usage, json(), extra);
}

std::string sse_finish_chunk(const ResponseMeta& m, FinishReason finish, bool include_usage,
                             const std::vector<int64_t>* stored) {
  json choice = m.kind == ApiKind::kChat ? json{{"delta", json::object()}} : json{{"text", ""}};
  choice["finish_reason"] = finish_json(finish);
  return choice_chunk(m, std::move(choice), include_usage, stored ? json{{"stored", *stored}} : json());
}

std::string sse_usage_chunk(const ResponseMeta& m, const Usage& u) {
  json j = base(m, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return "data: " + dump(j) + "\n\n";
}

std::string sse_error(const std::string& error_body) { return "data: " + error_body + "\n\n"; }

}  // namespace inferscale::server
