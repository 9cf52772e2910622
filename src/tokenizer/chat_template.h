// Chat templates for the supported families, written natively (no Jinja): Llama 3, ChatML (Qwen,
// SmolLM2), Mistral (v3 [INST]) and a plain-text fallback. The family is recognized in the model's
// template source (tokenizer_config.json `chat_template`, GGUF `tokenizer.chat_template`);
// load_tokenizer.h (resolve_chat_template) says what a model gets when its source is missing or
// not recognized:
//   - a recognized source: its family (ChatML with the default system prompt the source writes);
//   - an unrecognized source: a warning at load, then the family whose special tokens the
//     vocabulary has (guess_chat_family), else kPlain;
//   - no source: the guessed family, else kPlain (a base model), with a warning.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace inferscale {

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

// kLlama3: the Llama 3 template as in the shared llama3.1 tokenizer_config.json (header + trimmed
// content per message, BOS first). kLlama31: Llama-3.1-Instruct's template (a system block with
// "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" always comes first).
// kChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, "<|im_start|>assistant\n" as the
// generation prompt, and a default system message first when the conversation has none and the
// template writes one (Qwen2.5: "You are a helpful assistant."; SmolLM2: "You are a helpful AI
// assistant named SmolLM, trained by Hugging Face"). kMistral: Mistral-7B-Instruct-v0.3's
// ([INST] ... [/INST], the system prompt joined to the last user turn).
// kPlain: the fallback for models without a usable template: "{role}: {content}\n" per message and
// "assistant:" as the generation prompt; no special tokens (the text is encoded without parsing
// them, BOS as the tokenizer adds it) and no end-of-turn token, so a turn ends at EOS, max_tokens
// or a stop string.
// kNone: no template at all (a default-constructed ChatTemplate); render() refuses.
enum class ChatFamily { kNone, kLlama3, kLlama31, kChatML, kMistral, kPlain };

const char* chat_family_name(ChatFamily family);

class ChatTemplate {
 public:
  ChatTemplate() = default;
  // default_system: kChatML's system message for conversations without one ("" -> none).
  explicit ChatTemplate(ChatFamily family, std::string bos_text = {}, std::string eos_text = {},
                        std::string default_system = {})
      : family_(family),
        bos_text_(std::move(bos_text)),
        eos_text_(std::move(eos_text)),
        default_system_(std::move(default_system)) {}

  // The template of a chat_template source: its family (kNone when the source is empty or of no
  // family we know) and, for ChatML, the default system prompt it writes.
  static ChatTemplate from_source(const std::string& jinja_source, std::string bos_text = {},
                                  std::string eos_text = {});
  // Picks the family from a chat_template source ("" or unrecognized -> kNone): Llama 3 by
  // <|start_header_id|> (3.1 when it writes "Cutting Knowledge Date"), ChatML by <|im_start|> and
  // <|im_end|>, Mistral by [INST].
  static ChatFamily detect(const std::string& jinja_source);
  // ChatML's default system prompt in a template source: the text of a string literal
  // '<|im_start|>system\n...<|im_end|>' (Jinja escapes undone); "" when there is none.
  static std::string chatml_default_system(const std::string& jinja_source);

  ChatFamily family() const { return family_; }
  // What a user of a chat model should be told about how this template was chosen ("" when the
  // model's own template was recognized): set by resolve_chat_template, logged by the loader of a
  // chat model (an encoder's missing template is no news).
  const std::string& note() const { return note_; }
  void set_note(std::string note) { note_ = std::move(note); }
  const std::string& default_system() const { return default_system_; }
  // How to encode render()'s text: a family writes its special tokens (and BOS where it wants one)
  // as text, so they are parsed and nothing is added; kPlain writes none, so nothing is parsed (a
  // user's "<|im_end|>" stays text) and BOS comes as the tokenizer adds it.
  EncodeOptions encode_options(const Tokenizer& tok) const;

  // The prompt text, special tokens written as text (see encode_options). Includes BOS text when
  // the family's template writes it (empty bos_text: the family's usual one). Throws kInvalidInput
  // naming the problem for an empty conversation, a role other than system/user/assistant, or an
  // order the template rejects; kUnsupported for kNone.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  ChatFamily family_ = ChatFamily::kNone;
  std::string bos_text_;
  std::string eos_text_;
  std::string default_system_;
  std::string note_;
};

}  // namespace inferscale
