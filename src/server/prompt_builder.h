// From a parsed request to what the engine takes: prompt ids and a max_tokens that fits the
// context. Every prompt, chat or completion, is laid out by the one builder (memory/
// prompt_layout.h): here without facts, or through the MemoryProvider, whose preparation places
// the retrieved facts in the same layout on the engine thread. Runs on HTTP threads; the
// tokenizer and chat template are only read.
#pragma once
#include <cstdint>
#include <optional>

#include "memory/compose/prompt_layout.h"
#include "server/api_request.h"
#include "server/memory_provider.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale::server {

// What the request's prompt is made of (its messages, or its completion prompt).
PromptSource prompt_source(const GenerateRequest& req);

// `memory` may be null (memory not enabled); with memory, `fit` is what the prompt must fit once
// it is composed (MemoryProvider::prepare). Throws ApiError / inferscale::Error.
PreparedPrompt build_prompt(const GenerateRequest& req, const Tokenizer& tok, const ChatTemplate& tmpl,
                            MemoryProvider* memory, const PromptFit& fit = {});

// Rejects a prompt that leaves no room for output (400, code "context_length_exceeded") and fits
// max_tokens: an explicit value must fit (else 400), a default one becomes the rest of the window.
void fit_to_context(GenerateRequest& req, int64_t prompt_tokens, const PromptLimits& limits);
// The same rule over its inputs alone: returns the max_tokens to run with.
int32_t fit_max_tokens(ApiKind kind, std::optional<int32_t> max_tokens, int64_t prompt_tokens, const PromptLimits& limits);

}  // namespace inferscale::server
