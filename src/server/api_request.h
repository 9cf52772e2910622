// The native form of an OpenAI-style request, filled in on the HTTP thread. Nothing here is JSON:
// the engine only ever sees token ids and SamplingParams (DESIGN.md section 3).
//
// Parsing rejects with ApiError 400 (naming the field): invalid JSON, a body that is not an object,
// a missing required field, a wrong type, a value out of range, and OpenAI features this server
// does not implement (n > 1, penalties, tools, suffix, ...) rather than silently ignoring them.
// Unknown top-level fields are ignored, as OpenAI-compatible servers do.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/request.h"
#include "model/generation_config.h"
#include "tokenizer/chat_render.h"
#include "server/memory_spec.h"
#include "tokenizer/chat_template.h"

namespace inferscale::server {

enum class ApiKind { kChat, kCompletion };

struct GenerateRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;

  // kChat: the conversation ("developer" messages arrive here as "system").
  std::vector<ChatMessage> messages;
  // kCompletion: a text prompt, or token ids when the client sent a token array.
  std::string prompt_text;
  std::optional<std::vector<int32_t>> prompt_ids;

  // kChat: vLLM's add_generation_prompt (default true) and continue_final_message.
  ChatRenderOptions chat_render;

  // sampling.logprobs / prompt_logprobs are what the engine computes: the counts below, the prompt
  // also for echo with logprobs and for max_tokens 0 (scoring only).
  SamplingParams sampling;
  bool max_tokens_given = false;  // false: the server picks (the rest of the context window)
  int32_t logprobs = -1;          // top-N per generated token (chat: top_logprobs with logprobs true); -1 none
  int32_t prompt_logprobs = -1;   // vLLM's prompt_logprobs: top-N per prompt token; -1 none
  bool echo = false;              // kCompletion: the prompt (with logprobs: its scores) comes first
  bool return_token_ids = false;  // vLLM's: prompt_token_ids and token_ids in the response
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  std::optional<MemorySpec> memory;
};

// Request bodies nest arrays and objects at most this deep (OpenAI's and Mem0's bodies use ~6).
inline constexpr size_t kMaxJsonDepth = 64;
// A chat request's messages (each one is rendered and tokenized; the body's size bounds their text).
inline constexpr size_t kMaxChatMessages = 4096;
// Parses a body: 400 when it nests deeper than kMaxJsonDepth, is not valid JSON or not a JSON object.
nlohmann::json parse_json_body(const std::string& body);

// `defaults` fill the sampling fields the body does not set (the served model's: model/
// generation_config.h); a field the body sets, even to OpenAI's default value, wins.
GenerateRequest parse_chat_request(const nlohmann::json& body, const SamplingDefaults& defaults = {});
GenerateRequest parse_completion_request(const nlohmann::json& body, const SamplingDefaults& defaults = {});

}  // namespace inferscale::server
