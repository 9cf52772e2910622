#include "server/prompt_builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/api_error.h"

namespace inferscale::server {

PromptSource prompt_source(const GenerateRequest& req) {
  if (req.kind == ApiKind::kChat) return PromptSource::of_chat(req.messages, req.chat_render);
  return req.prompt_ids ? PromptSource::of_ids(*req.prompt_ids) : PromptSource::of_text(req.prompt_text);
}

PreparedPrompt build_prompt(const GenerateRequest& req, const Tokenizer& tok, const ChatTemplate& tmpl,
                            MemoryProvider* memory, const PromptFit& fit) {
  if (req.prompt_ids) {
    const int32_t vocab = tok.vocab_size();
    for (int32_t id : *req.prompt_ids)
      if (id >= vocab) throw bad_request(fmt::format("'prompt': token id {} is outside the vocabulary of {}", id, vocab), "prompt");
  }
  if (req.memory && req.memory->mode != MemoryMode::kOff) {
    if (!memory) throw bad_request("memory is not enabled on this server", "memory", "memory_disabled");
    return memory->prepare(req, fit);
  }
  PreparedPrompt p;
  p.ids = frame_prompt(prompt_source(req), tok, tmpl, nullptr).before;
  if (p.ids.empty()) throw bad_request("the prompt is empty after tokenization", req.kind == ApiKind::kChat ? "messages" : "prompt");
  return p;
}

int32_t fit_max_tokens(ApiKind kind, std::optional<int32_t> max_tokens, int64_t prompt_tokens, const PromptLimits& limits) {
  const int64_t n = prompt_tokens;
  const int64_t window = std::min<int64_t>(limits.max_model_len, limits.kv_capacity_tokens);
  const char* param = kind == ApiKind::kChat ? "messages" : "prompt";
  if (n >= window)
    throw bad_request(fmt::format("the prompt has {} tokens; this server takes at most {} prompt tokens ({} in all, "
                                  "prompt and output)", n, window - 1, window),
                      param, "context_length_exceeded");
  const int64_t room = window - n;
  if (!max_tokens) return static_cast<int32_t>(room);
  if (*max_tokens > room)
    throw bad_request(fmt::format("max_tokens is {} but the prompt has {} tokens and this server takes {} in all: "
                                  "at most {} tokens can be generated", *max_tokens, n, window, room),
                      "max_tokens", "context_length_exceeded");
  return *max_tokens;
}

void fit_to_context(GenerateRequest& req, int64_t prompt_tokens, const PromptLimits& limits) {
  req.sampling.max_tokens = fit_max_tokens(
      req.kind, req.max_tokens_given ? std::optional<int32_t>(req.sampling.max_tokens) : std::nullopt, prompt_tokens, limits);
}

}  // namespace inferscale::server
