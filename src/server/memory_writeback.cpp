#include "server/memory_writeback.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "memory/formats/chat_turn.h"
#include "server/api_error.h"

namespace inferscale::server {
namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
}

[[noreturn]] void refuse(const std::string& why) { throw bad_request("'memory.store' " + why, "memory.store"); }

}  // namespace

std::optional<WriteBack> WriteBack::of(const GenerateRequest& req, MemoryProvider* memory) {
  if (!req.memory || req.memory->store == MemorySpec::Store::kNone) return std::nullopt;
  if (req.kind != ApiKind::kChat) refuse("works on chat completions, which have a user message and a reply");
  if (req.sampling.max_tokens == 0) refuse("needs a reply to store: max_tokens 0 only scores the prompt");
  if (req.chat_render.continue_final_message)
    refuse("cannot be combined with continue_final_message (the reply would be half of a given message)");
  const auto last_user = std::find_if(req.messages.rbegin(), req.messages.rend(), [](const ChatMessage& m) { return m.role == "user"; });
  if (last_user == req.messages.rend()) refuse("needs a user message to store");
  if (!memory) throw bad_request("memory is not enabled on this server", "memory", "memory_disabled");
  WriteBack w;
  const MemoryRequest r = req.memory->resolved();
  w.store_ = &memory->store();
  w.tenant_ = r.tenant;
  w.user_ = r.user;
  w.conversation_ = req.memory->conversation.empty() ? kChatConversation : req.memory->conversation;
  w.question_ = last_user->content;
  w.with_reply_ = req.memory->store == MemorySpec::Store::kAll;
  return w;
}

std::vector<int64_t> WriteBack::write(std::string_view reply) const {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<NewFact> turns;
  if (!blank(question_)) turns.push_back(chat_turn("user", question_, now));
  if (with_reply_ && !blank(reply)) turns.push_back(chat_turn("assistant", std::string(reply), now));
  if (turns.empty()) return {};
  return store_->add_turns(tenant_, user_, conversation_, turns);
}

}  // namespace inferscale::server
