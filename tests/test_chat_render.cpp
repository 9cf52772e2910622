// render_chat (tokenizer/chat_render.h): vLLM's add_generation_prompt and continue_final_message on
// every chat family.
#include <gtest/gtest.h>

#include "tokenizer/chat_render.h"
#include "util/check.h"

using namespace inferscale;

namespace {

const std::vector<ChatMessage> kConversation = {{"system", "Be brief."}, {"user", "Capital of France?"}};

}  // namespace

TEST(ChatRender, ContinueFinalMessageLeavesTheAnswerOpen) {
  for (ChatFamily f : {ChatFamily::kLlama3, ChatFamily::kLlama31, ChatFamily::kChatML, ChatFamily::kMistral}) {
    const ChatTemplate t(f);
    std::vector<ChatMessage> msgs = kConversation;
    EXPECT_EQ(render_chat(t, msgs, {}), t.render(msgs, true)) << chat_family_name(f);
    EXPECT_EQ(render_chat(t, msgs, {.add_generation_prompt = false}), t.render(msgs, false)) << chat_family_name(f);
    msgs.push_back({"assistant", "Paris, of course. \n"});  // trailing whitespace is cut (HF does too)
    const std::string open = render_chat(t, msgs, {.add_generation_prompt = false, .continue_final_message = true});
    // The closed conversation minus the end of the last turn: it ends on the (trimmed) answer.
    const std::string closed = t.render(msgs, false);
    EXPECT_EQ(closed.rfind(open, 0), 0u) << chat_family_name(f) << ": " << open;
    EXPECT_GT(closed.size(), open.size()) << chat_family_name(f);
    const std::string answer = "Paris, of course.";
    ASSERT_GE(open.size(), answer.size());
    EXPECT_EQ(open.substr(open.size() - answer.size()), answer) << chat_family_name(f);
    // Where the template opens an assistant turn, the open answer continues exactly that.
    if (f != ChatFamily::kMistral) EXPECT_EQ(open, t.render(kConversation, true) + answer) << chat_family_name(f);
  }
}

TEST(ChatRender, ContinueFinalMessageNeedsAnOpenableAssistantMessage) {
  const ChatTemplate t(ChatFamily::kChatML);
  std::vector<ChatMessage> msgs = kConversation;
  EXPECT_THROW(render_chat(t, msgs, {.add_generation_prompt = false, .continue_final_message = true}), Error);  // last is the user's
  msgs.push_back({"assistant", "Paris"});
  EXPECT_THROW(render_chat(t, msgs, {.add_generation_prompt = true, .continue_final_message = true}), Error);
  msgs.back().content = " \n ";
  EXPECT_THROW(render_chat(t, msgs, {.add_generation_prompt = false, .continue_final_message = true}), Error);
}
