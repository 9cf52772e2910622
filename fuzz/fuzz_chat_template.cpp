// Chat templates (the Jinja source a model file or tokenizer_config.json carries): the family
// recognizer and rendering a conversation with what it recognized.
#include <vector>

#include "fuzz_input.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/chat_template.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(fuzz::text(data, size));
  fuzz::expect_clear_error([&] {
    ChatTemplate::detect(source);
    ChatTemplate::chatml_default_system(source);
    const ChatTemplate t = ChatTemplate::from_source(source, "<s>");
    const std::vector<ChatMessage> chat{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "And?"}};
    render_chat(t, chat, {});
    fuzz::expect_clear_error([&] { render_chat(t, {{"user", "Hi"}, {"assistant", "Hel"}}, {false, true}); });
  });
  return 0;
}
