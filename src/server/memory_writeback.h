// Conversation write-back: `memory.store: true` on a chat request appends the user's last message
// to the user's memory as a turn of a conversation (memory.conversation, default "chat";
// memory/formats/chat_turn.h), so chats accumulate memory with no separate call. `"store": "all"` appends
// the assistant's reply as a second turn too: an explicit choice, since a wrong reply then becomes
// a memory that can outrank the user's own facts.
//
// When: once the reply is complete (finish reason stop or length), on the HTTP thread, before the
// answer's last part leaves: the final chunk of a stream (which then carries
// "memory": {"stored": [ids]}) or the whole non-streamed body (whose memory report gets "stored").
// FactStore commits with synchronous=FULL, so what a client was told is stored survives a crash. A
// request cancelled or failed before its end stores nothing; a failed write fails the request
// (an error event in a stream).
//
// Not on this request's path: the turns' KV. They are encoded like any new fact, when a later
// request first retrieves them; the dense retriever embeds them before the user's next search.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memory/store/fact_store.h"
#include "server/api_request.h"
#include "server/memory_provider.h"

namespace inferscale::server {

class WriteBack {
 public:
  // Nothing unless the request's memory object asks to store. Throws ApiError 400 (param
  // "memory.store") for requests whose exchange it cannot write: a completion, scoring only
  // (max_tokens 0), continue_final_message, or no user message; memory_disabled without memory.
  // The tenant must be settled in req.memory (tenant.h).
  static std::optional<WriteBack> of(const GenerateRequest& req, MemoryProvider* memory);

  // Appends the user's message and, with "store": "all", `reply` (each skipped when blank: no turn
  // without text), durable when it returns. Returns their ids (in the tenant), in that order.
  std::vector<int64_t> write(std::string_view reply) const;

 private:
  WriteBack() = default;
  FactStore* store_ = nullptr;
  std::string tenant_, user_, conversation_, question_;
  bool with_reply_ = false;  // "store": "all"
};

}  // namespace inferscale::server
