// The `memory` object of a request (InferScale's extension to the OpenAI API), parsed into native
// types on the HTTP thread:
//
//   "memory": {"user": "alice",          required, 1..256 bytes without control characters (tenant.h);
//                                        Mem0's name "user_id" is the same field
//              "tenant": "acme",         optional (default: the request's, tenant.h; with API keys
//                                        it must be the key's)
//              "k": 10,                  facts to retrieve, 0..256               (default: the server's);
//                                        Mem0's name "top_k" is the same field
//              "w": 2,                   context-window turns per fact, 0..128   (default: the server's)
//              "query": "...",           retrieval query (default: the last user message, or a
//                                        completion's prompt)
//              "query_vector": [0.1, ...], or a query vector the client computed, matched against
//                                        the vectors it supplied with the facts (not with "query")
//              "mode": "inject",         inject | text | off                     (default inject)
//              "order": "rank",          rank | time                             (default rank)
//              "recompute": 2,           inject: the first r tokens of each fact are computed at
//                                        serving time instead of injected, 0..128 (default: the server's)
//              "recompute_last": 1,      inject: the last m placed facts are computed whole, 0..256
//              "recompute_attention": 0.1, inject: this fraction of the facts' tokens, those the
//                                        question attends to most in a probe pass, is computed at
//                                        serving time, 0..1 (default: the server's)
//              "name": "Alice",          how the memory block names the user (default: the user id)
//              "store": true,            chat: the user's last message is appended to the user's memory
//                                        as a turn (memory_writeback.h); "all": the reply too (the
//                                        model's own words then become memories); "user" = true;
//                                        false = "none" (default); not with mode off
//              "conversation": "chat"}   with store: the conversation they go to (default "chat")
//
// The limits are the memory module's (MemoryRequest::kMax*, memory/compose/compose.h): one set for the
// API, the server's defaults and the service.
//
// mode and order are the memory module's own enums (memory/compose/compose.h): rank puts the best-ranked
// fact last, right before the question; time orders them by time.
//
// Unknown keys are rejected (a typo must not silently turn memory off).
//
// The extension point: a MemoryProvider (memory_provider.h) turns a MemorySpec plus the
// conversation into the prompt ids and, for mode inject, the injected span, before the request
// reaches the engine. Until a provider is installed, any memory object other than mode "off"
// is refused with 400 "memory is not enabled on this server".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "memory/compose/compose.h"

namespace inferscale::server {

// The memory module's MemoryRequest as parsed from JSON, before the tenant is settled: `tenant`
// stays "" until the object or the X-InferScale-Tenant header names one (tenant.h); resolved()
// turns "" into the default tenant.
struct MemorySpec : MemoryRequest {
  static constexpr size_t kMaxVectorDim = 16384;

  enum class Store { kNone, kUser, kAll };
  Store store = Store::kNone;  // what of the exchange is written back (memory_writeback.h)
  std::string conversation;  // with store; "" = kChatConversation

  MemorySpec() { tenant.clear(); }
  MemoryRequest resolved() const {
    MemoryRequest r = *this;
    if (r.tenant.empty()) r.tenant = kDefaultTenant;
    return r;
  }
};

// Parses and validates the object; throws ApiError 400 naming the field ("memory.k", ...).
MemorySpec parse_memory_spec(const nlohmann::json& j);

}  // namespace inferscale::server
