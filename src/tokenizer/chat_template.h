// Chat templates for the supported families, written natively (no Jinja): Llama 3, ChatML (Qwen)
// and Mistral (v3 [INST]). The family is chosen from the model's tokenizer_config.json
// chat_template text, or from the architecture when the model ships none.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace inferscale {

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

// kLlama3: the Llama 3 template as in the shared llama3.1 tokenizer_config.json (header + trimmed
// content per message, BOS first). kLlama31: Llama-3.1-Instruct's template (a system block with
// "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" always comes first).
// kChatML: Qwen2.5's (default system prompt "You are a helpful assistant."). kMistral:
// Mistral-7B-Instruct-v0.3's ([INST] ... [/INST], the system prompt joined to the last user turn).
enum class ChatFamily { kNone, kLlama3, kLlama31, kChatML, kMistral };

const char* chat_family_name(ChatFamily family);

class ChatTemplate {
 public:
  ChatTemplate() = default;
  explicit ChatTemplate(ChatFamily family, std::string bos_text = {}, std::string eos_text = {})
      : family_(family), bos_text_(std::move(bos_text)), eos_text_(std::move(eos_text)) {}

  // Picks the family from a tokenizer_config.json chat_template string ("" -> kNone).
  static ChatFamily detect(const std::string& jinja_source);

  ChatFamily family() const { return family_; }
  // The prompt text, special tokens written as text (encode with parse_special and without
  // add_special). Includes BOS text when the family's template writes it (empty bos_text: the
  // family's usual one). Throws kInvalidInput naming the problem for an empty conversation, a role
  // other than system/user/assistant, or an order the template rejects; kUnsupported for kNone.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  ChatFamily family_ = ChatFamily::kNone;
  std::string bos_text_;
  std::string eos_text_;
};

}  // namespace inferscale
