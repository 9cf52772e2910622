// Chat templates: native renderers against transformers' apply_chat_template goldens, family
// detection, and the errors for roles and orders a template rejects.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

ChatFamily family_named(const std::string& name) {
  for (const ChatFamily f : {ChatFamily::kLlama3, ChatFamily::kLlama31, ChatFamily::kChatML, ChatFamily::kMistral,
                             ChatFamily::kPlain})
    if (name == chat_family_name(f)) return f;
  ADD_FAILURE() << "unknown family " << name;
  return ChatFamily::kNone;
}

// bos/eos text as each model's tokenizer_config.json gives them.
std::pair<std::string, std::string> bos_eos_of(ChatFamily f) {
  switch (f) {
    case ChatFamily::kLlama3:
    case ChatFamily::kLlama31: return {"<|begin_of_text|>", "<|eot_id|>"};
    case ChatFamily::kMistral: return {"<s>", "</s>"};
    default: return {};
  }
}

ChatTemplate template_for(ChatFamily f) {
  auto [bos, eos] = bos_eos_of(f);
  return ChatTemplate(f, bos, eos);
}

// The template of golden source `name` (a key of "detect"), as a loader builds it from the text.
ChatTemplate golden_template(const nlohmann::json& g, const std::string& name) {
  const std::string source = g.at("detect").at(name);
  auto [bos, eos] = bos_eos_of(ChatTemplate::detect(source));
  return ChatTemplate::from_source(source, bos, eos);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m.at("role"), m.at("content")});
  return out;
}

ErrorKind error_kind(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error thrown";
  return ErrorKind::kInternal;
}

}  // namespace

TEST(TokenizerChatTemplate, MatchesTransformersGoldens) {
  const nlohmann::json g = load_fixture("chat_template_goldens.json");
  int rendered = 0, rejected = 0;
  for (const auto& c : g.at("cases")) {
    const ChatTemplate t = golden_template(g, c.at("family"));
    const auto msgs = messages_of(c.at("messages"));
    const bool gen = c.at("add_generation_prompt");
    SCOPED_TRACE(c.at("family").get<std::string>() + " " + c.at("messages").dump());
    if (c.contains("error")) {
      EXPECT_EQ(error_kind([&] { t.render(msgs, gen); }), ErrorKind::kInvalidInput);
      ++rejected;
    } else {
      EXPECT_EQ(t.render(msgs, gen), c.at("text").get<std::string>());
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 50);
  EXPECT_GE(rejected, 2);
}

TEST(TokenizerChatTemplate, ChatMLDefaultSystemPromptComesFromTheTemplate) {
  const nlohmann::json g = load_fixture("chat_template_goldens.json");
  EXPECT_EQ(golden_template(g, "smollm2").default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(golden_template(g, "chatml").default_system(), "You are a helpful assistant.");
  // Literal newline, double quotes with an escaped quote, an escaped newline inside.
  EXPECT_EQ(ChatTemplate::chatml_default_system("{{ \"<|im_start|>system\nSay \\\"hi\\\"\\nfirst<|im_end|>\" }}<|im_start|>"),
            "Say \"hi\"\nfirst");
  // Only the conversation's own system message: no default.
  EXPECT_EQ(ChatTemplate::chatml_default_system(
                "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
                "{%- endif %}"),
            "");
  EXPECT_EQ(ChatTemplate::chatml_default_system(""), "");
  // Without a default, a conversation without a system message gets none.
  EXPECT_EQ(ChatTemplate(ChatFamily::kChatML).render({{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const std::string qwen3 = shared_data("tokenizers/qwen3/tokenizer_config.json");
  if (std::filesystem::exists(qwen3)) {  // Qwen3's template writes no default system prompt
    const std::string src = nlohmann::json::parse(std::ifstream(qwen3)).at("chat_template");
    const ChatTemplate t = ChatTemplate::from_source(src);
    EXPECT_EQ(t.family(), ChatFamily::kChatML);
    EXPECT_EQ(t.default_system(), "");
  }
}

TEST(TokenizerChatTemplate, PlainFallbackFormat) {
  const ChatTemplate t(ChatFamily::kPlain);
  EXPECT_EQ(t.render({{"system", "Be brief."}, {"user", "Hi <|im_end|>"}, {"assistant", "Hello."}, {"user", "Bye"}},
                     true),
            "system: Be brief.\nuser: Hi <|im_end|>\nassistant: Hello.\nuser: Bye\nassistant:");
  EXPECT_EQ(t.render({{"user", "Hi"}}, false), "user: Hi\n");
  EXPECT_EQ(error_kind([&] { t.render({{"tool", "x"}}, true); }), ErrorKind::kInvalidInput);
  const ByteTokenizer bytes;
  const EncodeOptions plain = t.encode_options(bytes);
  EXPECT_FALSE(plain.parse_special);  // the user's "<|im_end|>" stays text
  EXPECT_EQ(plain.add_special, bytes.adds_bos());
  const EncodeOptions chatml = ChatTemplate(ChatFamily::kChatML).encode_options(bytes);
  EXPECT_TRUE(chatml.parse_special);
  EXPECT_FALSE(chatml.add_special);
  EXPECT_STREQ(chat_family_name(ChatFamily::kPlain), "plain");
}

// The fallback rule of resolve_chat_template: recognized source -> its family; unrecognized or
// missing -> a note (for the loader of a chat model to log), then the vocabulary's family, else
// the plain format.
TEST(TokenizerChatTemplate, ResolveFallsBackWithANote) {
  BpeTokenizerSpec spec;
  spec.tokens = byte_level_tokens();
  const BpeTokenizer no_chat_tokens(spec);
  spec.added = {{256, "<|im_start|>", true}, {257, "<|im_end|>", true}};
  const BpeTokenizer chatml_vocab(spec);
  const std::string smol = load_fixture("chat_template_goldens.json").at("detect").at("smollm2");
  const std::string unknown = "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}";
  {
    const ChatTemplate t = resolve_chat_template(smol, no_chat_tokens, "", "", "m");
    EXPECT_EQ(t.family(), ChatFamily::kChatML);  // the source decides, not the vocabulary
    EXPECT_EQ(t.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    EXPECT_EQ(t.note(), "");
  }
  {
    const ChatTemplate t = resolve_chat_template(unknown, chatml_vocab, "", "", "model-x");
    EXPECT_EQ(t.family(), ChatFamily::kChatML);
    EXPECT_EQ(t.default_system(), "");  // a guessed ChatML writes no default system prompt
    EXPECT_EQ(t.note().rfind("model-x: chat template not recognized", 0), 0u) << t.note();
  }
  {
    const ChatTemplate t = resolve_chat_template(unknown, no_chat_tokens, "", "", "model-y");
    EXPECT_EQ(t.family(), ChatFamily::kPlain);
    EXPECT_EQ(t.note().rfind("model-y: chat template not recognized", 0), 0u) << t.note();
  }
  {
    const ChatTemplate plain = resolve_chat_template("", no_chat_tokens, "", "", "base");
    const ChatTemplate guessed = resolve_chat_template("", chatml_vocab, "", "", "base");
    EXPECT_EQ(plain.family(), ChatFamily::kPlain);
    EXPECT_EQ(guessed.family(), ChatFamily::kChatML);
    EXPECT_EQ(plain.note().rfind("base: no chat template", 0), 0u) << plain.note();
    EXPECT_EQ(guessed.note().rfind("base: no chat template", 0), 0u) << guessed.note();
  }
  {
    // Reasoning blocks are not rendered: say so.
    const ChatTemplate t =
        resolve_chat_template("<|im_start|>{{ m.content }}<|im_end|>{% if x %}<think>{% endif %}", chatml_vocab, "", "",
                              "qwen3");
    EXPECT_EQ(t.family(), ChatFamily::kChatML);
    EXPECT_NE(t.note().find("reasoning blocks"), std::string::npos) << t.note();
  }
}

TEST(TokenizerChatTemplate, Llama31SystemHeader) {
  const ChatTemplate t(ChatFamily::kLlama31, "<|begin_of_text|>");
  EXPECT_EQ(t.render({{"user", "Hi"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(TokenizerChatTemplate, DetectsFamilies) {
  const nlohmann::json g = load_fixture("chat_template_goldens.json");
  for (const auto& [name, jinja] : g.at("detect").items())
    EXPECT_EQ(ChatTemplate::detect(jinja.get<std::string>()), family_named(g.at("families").at(name))) << name;
  EXPECT_EQ(ChatTemplate::detect(""), ChatFamily::kNone);
  EXPECT_EQ(ChatTemplate::detect("{{ messages[0].content }}"), ChatFamily::kNone);
}

TEST(TokenizerChatTemplate, RejectsUnsupportedRolesAndOrders) {
  for (const ChatFamily f : {ChatFamily::kLlama3, ChatFamily::kLlama31, ChatFamily::kChatML, ChatFamily::kMistral}) {
    const ChatTemplate t = template_for(f);
    try {
      t.render({{"user", "a"}, {"tool", "b"}}, true);
      ADD_FAILURE() << "tool role accepted by " << chat_family_name(f);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
      EXPECT_NE(std::string(e.what()).find("'tool'"), std::string::npos) << e.what();
    }
    EXPECT_EQ(error_kind([&] { t.render({}, true); }), ErrorKind::kInvalidInput);
  }
  const ChatTemplate mistral = template_for(ChatFamily::kMistral);
  EXPECT_EQ(error_kind([&] { mistral.render({{"user", "a"}, {"system", "s"}}, true); }), ErrorKind::kInvalidInput);
  EXPECT_EQ(error_kind([&] { ChatTemplate().render({{"user", "a"}}, true); }), ErrorKind::kUnsupported);
}

TEST(TokenizerChatTemplate, RenderedPromptTokenizesWithSpecialTokens) {
  const std::string path = shared_data("tokenizers/llama3.1/tokenizer.json");
  IS_SKIP_WITHOUT(path);
  const auto tok = HfTokenizer::from_file(path);
  const std::string prompt = ChatTemplate(ChatFamily::kLlama3, "<|begin_of_text|>").render({{"user", "Hi"}}, true);
  const auto ids = tok->encode(prompt, {.add_special = false, .parse_special = true});
  EXPECT_EQ(ids, (std::vector<int32_t>{128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271}));
}
