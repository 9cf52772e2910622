// Chat messages as conversation turns of a user's memory: what Mem0's add (server/mem0_handler.h)
// and a chat's `memory.store` (server/memory_writeback.h) write. One shape for both, so a user's
// messages from either path form one conversation whose turns window each other (CWE).
#pragma once
#include <cstdint>
#include <string>

#include "memory/store/fact.h"

namespace inferscale {

// The conversation a user's chat turns go to unless the request names one.
inline constexpr const char* kChatConversation = "chat";

// A turn said by `speaker` ("user", "assistant" or a name) at unix second `at_s`: its date is
// that time in ISO 8601 UTC, so it renders "[2024-03-02T14:26:07Z] user: {text}".
NewFact chat_turn(std::string speaker, std::string text, int64_t at_s, std::string metadata = {});

}  // namespace inferscale
