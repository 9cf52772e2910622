// A conversation rendered with the model's chat template, with vLLM's two switches:
//   add_generation_prompt (default true): end with the opening of an assistant turn;
//   continue_final_message: leave the last (assistant) message open, no end-of-turn after it, so
//     the model continues it, or a client scores it with prompt_logprobs.
// continue_final_message follows HF transformers' apply_chat_template: render the whole
// conversation without a generation prompt, then cut right after the last occurrence of the final
// message's (whitespace-trimmed) content. It works for every template that writes the content
// verbatim, whatever its end-of-turn markup.
//
// Used by the server's plain chat prompts and by MemoryService's prompts with memory, so both
// build the same text.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace inferscale {

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // needs add_generation_prompt false
};

// Throws kInvalidInput when continue_final_message is combined with add_generation_prompt, the last
// message is not the assistant's or has no content, or the template does not keep that content;
// ChatTemplate::render's errors otherwise.
std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages, const ChatRenderOptions& opts);

}  // namespace inferscale
