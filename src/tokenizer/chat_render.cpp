#include "tokenizer/chat_render.h"

#include "util/check.h"

namespace inferscale {
namespace {

std::string trimmed(const std::string& s) {
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) + 1 - b);
}

}  // namespace

std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages, const ChatRenderOptions& opts) {
  if (!opts.continue_final_message) return tmpl.render(messages, opts.add_generation_prompt);
  IS_REQUIRE(!opts.add_generation_prompt, kInvalidInput, "continue_final_message cannot be combined with add_generation_prompt");
  IS_REQUIRE(!messages.empty() && messages.back().role == "assistant", kInvalidInput,
             "continue_final_message needs the last message to be the assistant's");
  const std::string final = trimmed(messages.back().content);
  IS_REQUIRE(!final.empty(), kInvalidInput, "continue_final_message needs a final assistant message with content");
  std::string text = tmpl.render(messages, false);
  const size_t at = text.rfind(final);
  IS_REQUIRE(at != std::string::npos, kInvalidInput,
             "the chat template does not keep the final message's text, so it cannot be continued");
  text.resize(at + final.size());
  return text;
}

}  // namespace inferscale
