// The extension point through which per-user memory reaches a request.
//
// On the HTTP thread, a request whose `memory` mode is not "off" is handed to the server's
// MemoryProvider, which returns the request's RequestMemory (memory/request_memory.h) for the
// engine's memory connector (engine/memory_connector.h) to plan ON THE ENGINE THREAD at admission
// (the memory pool, the backend and the KV blocks belong to it): retrieve the user's facts,
// encode those without KV as capture work inside the engine's steps, build the prompt ids
// ([prefix][header][f_k..f_1][footer][query]) and, for mode inject, the span whose KV is copied
// from the memory pool instead of computed. Without a provider such requests get 400 "memory is
// not enabled on this server".
//
//   HTTP thread                              engine thread
//   provider.prepare(req) -> RequestMemory
//   submit --------------------------------> engine: connector.plan() each step until ready
//                                            (retrieve; facts without KV encoded as captures
//                                            batched into the steps; compose, inject); the
//                                            prompt's fit (RequestMemory::fit) sets max_tokens;
//                                            served written; the step's output `admitted`:
//                                            RequestStream::accept()
//   poll() sees accepted <------------------
//   read served -> MemoryReport (the response's "memory" object, the metrics), the prompt as served
//
// RequestMemory::served is written only on the engine thread and only before accept(); the HTTP
// thread reads it only after a poll() reported `accepted`. accept() and poll() take the stream's
// mutex, so the writes happen-before the reads and no other lock is needed. A request that is
// rejected or cancelled before acceptance leaves it unread.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"
#include "memory/store/fact_store.h"
#include "memory/request_memory.h"
#include "memory/retrieval/retriever.h"
#include "server/api_request.h"
#include "server/memory_report.h"

namespace inferscale::server {

struct PromptLimits {
  int32_t max_model_len = 0;       // prompt + output tokens of one request
  int64_t kv_capacity_tokens = 0;  // what the whole KV cache holds
};

// What a prompt composed on the engine thread must fit, checked there before the request is
// admitted (prompt_builder.h's fit_max_tokens: a prompt too long, or an explicit max_tokens past
// the room it leaves, rejects the request with a 400).
struct PromptFit {
  PromptLimits limits;
  std::optional<int32_t> max_tokens;  // the request's; none: the rest of the window
};

struct PreparedPrompt {
  std::vector<int32_t> ids;
  // Set instead of `ids` when the prompt can only be built on the engine thread (memory): the
  // engine's connector plans it at admission (Submission::memory).
  std::shared_ptr<RequestMemory> memory;
};

class MemoryProvider {
 public:
  virtual ~MemoryProvider() = default;
  // Thread-safe.
  virtual BackgroundEncoding background() const { return {}; }
  // Called concurrently from HTTP threads: must be thread-safe. `req.memory` is set and its mode
  // is inject or text. Returns a PreparedPrompt whose `memory` is planned on the engine thread,
  // where the composed prompt must pass `fit`; both may throw inferscale::Error (kNotFound for an
  // unknown user, ...) or ApiError.
  virtual PreparedPrompt prepare(const GenerateRequest& req, const PromptFit& fit) = 0;

  // The store and retriever behind the provider, for the memory REST API (memory_handler.h). Both
  // are thread-safe: HTTP threads use them directly, never through the engine thread.
  virtual FactStore& store() = 0;
  virtual const Retriever& retriever() const = 0;
};

}  // namespace inferscale::server
