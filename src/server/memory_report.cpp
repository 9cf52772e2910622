#include "server/memory_report.h"

#include <spdlog/spdlog.h>

namespace inferscale::server {

MemoryReport served_report(const RequestMemory& m) {
  const MemoryPrompt& p = m.served;
  const MemoryRequest& req = m.request;
  if (!p.fallback.empty())
    spdlog::warn("memory: user {}: {} facts served as text instead of injected: {}", req.user, p.facts.size(),
                 p.fallback);
  spdlog::debug("memory: user {} k={} -> {} facts ({} encoded, {} from files), {} prompt tokens, {} injected", req.user,
                req.k, p.facts.size(), p.encoded, p.loaded, p.tokens.size(), p.injected ? p.injected->num_injected() : 0);
  MemoryReport r;
  r.mode = p.fallback.empty() ? req.mode : MemoryMode::kText;
  r.fallback = p.fallback;
  for (size_t i = 0; i < p.facts.size(); ++i) r.facts.push_back({p.facts[i].id, p.scores[i], p.facts[i].text});
  r.injected_tokens = p.injected ? p.injected->num_injected() : 0;
  r.recomputed_tokens = p.recomputed;
  r.encoded = p.encoded;
  r.loaded = p.loaded;
  r.retrieve_ms = p.retrieve_ms;
  r.kv_ms = p.kv_ms;
  return r;
}

}  // namespace inferscale::server
