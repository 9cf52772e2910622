// The extension point through which per-user memory reaches a request.
//
// On the HTTP thread, a request whose `memory` mode is not "off" is handed to the server's
// MemoryProvider, which returns a preparation to run ON THE ENGINE THREAD (the memory pool, the
// backend and the KV blocks belong to it): retrieve the user's facts, build the prompt ids
// ([prefix][header][f_k..f_1][footer][query]) and, for mode inject, the span whose KV is copied
// from the memory pool instead of computed. Without a provider such requests get 400
// "memory is not enabled on this server".
//
// What the preparation did travels back to the HTTP thread in a MemoryReport (the response's
// "memory" object and the memory metrics):
//
//   HTTP thread                              engine thread
//   provider.prepare(req) -> report (empty)
//   submit --------------------------------> warm(engine) until done: plan, then encode the
//                                            facts without KV a piece per engine step;
//                                            prepare(engine, p): retrieve, compose, inject;
//                                            fill *report; then RequestStream::accept()
//   poll() sees accepted <------------------
//   read *report
//
// The report is written only on the engine thread and only before accept(); the HTTP thread reads
// it only after a poll() reported `accepted`. accept() and poll() take the stream's mutex, so the
// writes happen-before the reads and no other lock is needed. A request that is rejected or
// cancelled before acceptance leaves the report unread.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"
#include "memory/fact_store.h"
#include "memory/retriever.h"
#include "server/api_request.h"
#include "server/memory_report.h"

namespace inferscale::server {

struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::optional<InjectedSpan> injected;
  // Kept alive until the request ends: e.g. a pin that stops the memory pool from evicting the
  // blocks behind `injected->pool_slots` while the request may still need them (preemption
  // re-injects).
  std::shared_ptr<void> hold;
  // Set instead of `ids` when the prompt can only be built on the engine thread (memory). It
  // fills ids, injected and hold.
  std::function<void(Engine&, PreparedPrompt&)> prepare;
  // Optional, with `prepare`: Submission::warm (async_engine.h), e.g. encoding a cold user's facts
  // in pieces between engine steps before `prepare` runs.
  std::function<bool(Engine&)> warm;
  // Set with `prepare`: filled by it on the engine thread, read by the HTTP thread after acceptance.
  std::shared_ptr<MemoryReport> report;
};

class MemoryProvider {
 public:
  virtual ~MemoryProvider() = default;
  // Thread-safe.
  virtual BackgroundEncoding background() const { return {}; }
  // Called concurrently from HTTP threads: must be thread-safe. `req.memory` is set and its mode
  // is inject or text. Returns a PreparedPrompt whose `prepare` runs on the engine thread; both
  // may throw inferscale::Error (kNotFound for an unknown user, ...) or ApiError.
  virtual PreparedPrompt prepare(const GenerateRequest& req) = 0;

  // The store and retriever behind the provider, for the memory REST API (memory_handler.h). Both
  // are thread-safe: HTTP threads use them directly, never through the engine thread.
  virtual FactStore& store() = 0;
  virtual const Retriever& retriever() const = 0;
};

}  // namespace inferscale::server
