// The prompt of a chat conversation for a model: its chat template rendered, then tokenized. The
// one way every path builds a chat prompt (plain requests, requests with memory, `generate` with
// a chat), so they agree whatever the template does, including when it refuses: a model without
// a template of a known family gets kUnsupported on every path alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale {

// The conversation's prompt ids. The template writes special tokens (and BOS where its family
// does) as text, so the text is parsed for special tokens and no BOS is added; message contents
// that spell a special token are the template's concern (ChatTemplate::render).
std::vector<int32_t> chat_prompt_tokens(const Tokenizer& tok, const ChatTemplate& tmpl,
                                        const std::vector<ChatMessage>& messages);

// The same prompt with `block` appended to the system message (after a blank line; a system
// message holding just the block goes first when there is none), split at `marker`, which the
// block holds once: the ids before and after it. Whatever goes in the marker's place, tokenized
// on its own, makes the prompt of a plain chat with that text in its system message.
struct SplitChatPrompt {
  std::vector<int32_t> before;
  std::vector<int32_t> after;
};
SplitChatPrompt chat_prompt_around(const Tokenizer& tok, const ChatTemplate& tmpl, std::vector<ChatMessage> messages,
                                   const std::string& block, const std::string& marker);

}  // namespace inferscale
