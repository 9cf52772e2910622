// Chat templates for the supported families, written natively (no Jinja): Llama 3, ChatML (Qwen)
// and Mistral (v3 [INST]). The family is chosen from the model's tokenizer_config.json
// chat_template text, or from the architecture when the model ships none.
#pragma once
#include <string>
#include <vector>

namespace inferscale {

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

enum class ChatFamily { kNone, kLlama3, kChatML, kMistral };

class ChatTemplate {
 public:
  ChatTemplate() = default;
  explicit ChatTemplate(ChatFamily family, std::string bos_text = {}, std::string eos_text = {})
      : family_(family), bos_text_(std::move(bos_text)), eos_text_(std::move(eos_text)) {}

  // Picks the family from a tokenizer_config.json chat_template string ("" -> kNone).
  static ChatFamily detect(const std::string& jinja_source);

  ChatFamily family() const { return family_; }
  // The prompt text, special tokens written as text (encode with parse_special). Includes BOS text
  // when the family's template writes it. Throws kInvalidInput on roles the template rejects.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  ChatFamily family_ = ChatFamily::kNone;
  std::string bos_text_;
  std::string eos_text_;
};

}  // namespace inferscale
