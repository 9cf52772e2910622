#include "tokenizer/chat_template.h"

#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {
namespace {

// Python's str.isspace, which Jinja's `trim` filter (str.strip) uses.
bool is_py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string trim(std::string_view s) {
  size_t begin = s.size(), end = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    if (!is_py_space(utf8_next(s, i))) {
      if (begin == s.size()) begin = at;
      end = i;
    }
  }
  return begin < end ? std::string(s.substr(begin, end - begin)) : std::string();
}

std::string llama3_turn(const ChatMessage& m) {
  return "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
}
constexpr const char* kLlama3Assistant = "<|start_header_id|>assistant<|end_header_id|>\n\n";

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// The value of a Jinja (Python-style) string literal body: \n, \t, \r, \\, \' and \" undone; other
// escapes kept as written.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    switch (const char c = s[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\':
      case '\'':
      case '"': out += c; break;
      default: out += '\\'; out += c;
    }
  }
  return out;
}

}  // namespace

const char* chat_family_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::kLlama3: return "llama3";
    case ChatFamily::kLlama31: return "llama3.1";
    case ChatFamily::kChatML: return "chatml";
    case ChatFamily::kMistral: return "mistral";
    case ChatFamily::kPlain: return "plain";
    default: return "none";
  }
}

ChatFamily ChatTemplate::detect(const std::string& jinja) {
  if (contains(jinja, "<|start_header_id|>"))
    return contains(jinja, "Cutting Knowledge Date") ? ChatFamily::kLlama31 : ChatFamily::kLlama3;
  if (contains(jinja, "<|im_start|>") && contains(jinja, "<|im_end|>")) return ChatFamily::kChatML;
  if (contains(jinja, "[INST]")) return ChatFamily::kMistral;
  return ChatFamily::kNone;
}

std::string ChatTemplate::chatml_default_system(const std::string& jinja) {
  // Each '<|im_start|>system' that opens a string literal and continues, in the same literal, with
  // a newline, some text and <|im_end|>. One followed by the literal's closing quote instead (as in
  // '<|im_start|>system\n' + messages[0]['content']) writes the conversation's own system message.
  static const std::string open = "<|im_start|>system";
  for (size_t at = jinja.find(open); at != std::string::npos; at = jinja.find(open, at + 1)) {
    const char quote = at > 0 ? jinja[at - 1] : '\0';
    if (quote != '\'' && quote != '"') continue;
    size_t i = at + open.size();
    if (jinja.compare(i, 1, "\n") == 0) {
      i += 1;  // a newline written as itself
    } else if (jinja.compare(i, 2, "\\n") == 0) {
      i += 2;  // ... or as an escape
    } else {
      continue;
    }
    const size_t end = jinja.find("<|im_end|>", i);
    if (end == std::string::npos || end == i) continue;
    const std::string_view body(jinja.data() + i, end - i);
    bool closed = false;  // an unescaped quote ends the literal before <|im_end|>
    for (size_t k = 0; k < body.size() && !closed; ++k) {
      if (body[k] == '\\') ++k;
      else closed = body[k] == quote;
    }
    if (!closed) return unescape(body);
  }
  return {};
}

ChatTemplate ChatTemplate::from_source(const std::string& jinja, std::string bos_text, std::string eos_text) {
  const ChatFamily family = detect(jinja);
  return ChatTemplate(family, std::move(bos_text), std::move(eos_text),
                      family == ChatFamily::kChatML ? chatml_default_system(jinja) : std::string());
}

EncodeOptions ChatTemplate::encode_options(const Tokenizer& tok) const {
  if (family_ == ChatFamily::kPlain) return {.add_special = tok.adds_bos(), .parse_special = false};
  return {.add_special = false, .parse_special = true};
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  const char* name = chat_family_name(family_);
  IS_REQUIRE(family_ != ChatFamily::kNone, kUnsupported, "no chat template: the model has none of a known family");
  IS_REQUIRE(!messages.empty(), kInvalidInput, "chat template {}: the conversation has no messages", name);
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    IS_REQUIRE(r == "system" || r == "user" || r == "assistant", kInvalidInput,
               "chat template {}: unsupported role '{}' in message {} (only system, user, assistant)", name, r, i);
  }
  const bool has_system = messages[0].role == "system";
  std::string out;
  switch (family_) {
    case ChatFamily::kLlama3: {
      out = bos_text_.empty() ? "<|begin_of_text|>" : bos_text_;
      for (const ChatMessage& m : messages) out += llama3_turn(m);
      if (add_generation_prompt) out += kLlama3Assistant;
      break;
    }
    case ChatFamily::kLlama31: {
      // The system block always comes first; the knowledge/today dates are the template's defaults.
      out = bos_text_.empty() ? "<|begin_of_text|>" : bos_text_;
      out += "<|start_header_id|>system<|end_header_id|>\n\n";
      out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
      out += has_system ? trim(messages[0].content) : std::string();
      out += "<|eot_id|>";
      for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) out += llama3_turn(messages[i]);
      if (add_generation_prompt) out += kLlama3Assistant;
      break;
    }
    case ChatFamily::kChatML: {
      if (!has_system && !default_system_.empty()) out = "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatFamily::kMistral: {
      // After the optional system message: user, assistant, user, ... The system text is joined to
      // the last message only if that is a user turn (otherwise the template drops it).
      const size_t first = has_system ? 1 : 0;
      for (size_t i = first; i < messages.size(); ++i) {
        const bool want_user = (i - first) % 2 == 0;
        IS_REQUIRE((messages[i].role == "user") == want_user && messages[i].role != "system", kInvalidInput,
                   "chat template {}: after the optional system message, roles must alternate "
                   "user/assistant/user/... (message {} is '{}')",
                   name, i, messages[i].role);
      }
      out = bos_text_.empty() ? "<s>" : bos_text_;
      const std::string eos = eos_text_.empty() ? "</s>" : eos_text_;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          const bool join_system = has_system && i + 1 == messages.size();
          out += "[INST] " + (join_system ? messages[0].content + "\n\n" : std::string()) + m.content + "[/INST]";
        } else {
          out += " " + trim(m.content) + eos;
        }
      }
      break;  // the template has no generation prompt: the prompt already ends with [/INST]
    }
    case ChatFamily::kPlain: {
      for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
      if (add_generation_prompt) out += "assistant:";
      break;
    }
    default:
      break;
  }
  return out;
}

}  // namespace inferscale
