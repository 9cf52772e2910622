#include "model/chat_prompt.h"

#include "util/check.h"

namespace inferscale {
namespace {

std::vector<int32_t> encode_rendered(const Tokenizer& tok, const std::string& text) {
  return tok.encode(text, EncodeOptions{.add_special = false, .parse_special = true});
}

}  // namespace

std::vector<int32_t> chat_prompt_tokens(const Tokenizer& tok, const ChatTemplate& tmpl,
                                        const std::vector<ChatMessage>& messages) {
  return encode_rendered(tok, tmpl.render(messages, /*add_generation_prompt=*/true));
}

SplitChatPrompt chat_prompt_around(const Tokenizer& tok, const ChatTemplate& tmpl, std::vector<ChatMessage> messages,
                                   const std::string& block, const std::string& marker) {
  IS_CHECK(!marker.empty() && block.find(marker) != std::string::npos, "the block holds no marker");
  if (!messages.empty() && messages[0].role == "system")
    messages[0].content += (messages[0].content.empty() ? "" : "\n\n") + block;
  else
    messages.insert(messages.begin(), ChatMessage{"system", block});
  const std::string text = tmpl.render(messages, /*add_generation_prompt=*/true);
  const size_t at = text.find(marker);
  IS_CHECK(at != std::string::npos, "the chat template dropped the marker");
  return SplitChatPrompt{encode_rendered(tok, text.substr(0, at)), encode_rendered(tok, text.substr(at + marker.size()))};
}

}  // namespace inferscale
