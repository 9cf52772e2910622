// Chat templates: native renderers against transformers' apply_chat_template goldens, family
// detection, and the errors for roles and orders a template rejects.
#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

ChatFamily family_of(const std::string& name) {
  if (name == "llama3") return ChatFamily::kLlama3;
  if (name == "llama31") return ChatFamily::kLlama31;
  if (name == "chatml") return ChatFamily::kChatML;
  if (name == "mistral") return ChatFamily::kMistral;
  ADD_FAILURE() << "unknown family " << name;
  return ChatFamily::kNone;
}

// bos/eos text as each model's tokenizer_config.json gives them.
ChatTemplate template_for(ChatFamily f) {
  switch (f) {
    case ChatFamily::kLlama3:
    case ChatFamily::kLlama31: return ChatTemplate(f, "<|begin_of_text|>", "<|eot_id|>");
    case ChatFamily::kMistral: return ChatTemplate(f, "<s>", "</s>");
    default: return ChatTemplate(f);
  }
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
    const ChatTemplate t = template_for(family_of(c.at("family")));
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
  EXPECT_GE(rendered, 40);
  EXPECT_GE(rejected, 2);
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
    EXPECT_EQ(ChatTemplate::detect(jinja.get<std::string>()), family_of(name)) << name;
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
