// The extension point through which per-user memory reaches a request (not wired yet).
//
// On the HTTP thread, after parsing and before submission, a request whose `memory` mode is not
// "off" is handed to the server's MemoryProvider, which retrieves the user's facts and returns the
// prompt ids ([prefix][header][f_k..f_1][footer][query]) together with, for mode inject, the span
// whose KV is copied from the memory pool instead of computed. Without a provider such requests
// get 400 "memory is not enabled on this server".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "server/api_request.h"

namespace inferscale::server {

struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::optional<InjectedSpan> injected;
  // Kept alive until the request ends: e.g. a pin that stops the memory pool from evicting the
  // blocks behind `injected->pool_slots` while the request may still need them (preemption
  // re-injects).
  std::shared_ptr<void> hold;
};

class MemoryProvider {
 public:
  virtual ~MemoryProvider() = default;
  // Called concurrently from HTTP threads: must be thread-safe. `req.memory` is set and its mode
  // is inject or text. Throws inferscale::Error (kNotFound for an unknown user, ...) or ApiError.
  virtual PreparedPrompt prepare(const GenerateRequest& req) = 0;
};

}  // namespace inferscale::server
