// What the memory preparation of one request did: the response's "memory" object and the memory
// metrics. Made on the request's HTTP thread once the engine accepted it, from what the engine
// thread served (RequestMemory::served; memory_provider.h explains why that needs no lock).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/compose/compose.h"
#include "memory/request_memory.h"

namespace inferscale::server {

struct MemoryReport {
  struct PlacedFact {
    int64_t id = 0;
    double score = 0;  // the retriever's score
    std::string text;
  };
  MemoryMode mode = MemoryMode::kInject;  // as served: text when inject fell back
  std::vector<PlacedFact> facts;  // in placement order (rank: best-ranked last)
  int32_t injected_tokens = 0;    // tokens whose KV was copied from the memory pool
  int32_t recomputed_tokens = 0;  // fact tokens computed at serving time instead (memory.recompute)
  int32_t encoded = 0;            // facts encoded on demand for this request
  int32_t loaded = 0;             // facts read from KV files
  double retrieve_ms = 0;
  double kv_ms = 0;               // encoding + loading
  std::string fallback;           // inject served as text: why (empty: no fallback)
  // memory.store, non-streamed: the ids of the turns written back (memory_writeback.h); set on the
  // HTTP thread after the reply, before the body is made.
  std::optional<std::vector<int64_t>> stored;
};

// The report of a request's memory once the engine served it (RequestMemory::served; the mode
// asked for is the request's). Logs a fallback to text as a warning.
MemoryReport served_report(const RequestMemory& m);

// Background encoding of written facts (memory_bridge.h), for /metrics.
struct BackgroundEncoding {
  int64_t queued = 0;   // facts waiting for it
  int64_t encoded = 0;  // facts it encoded since the start
};

}  // namespace inferscale::server
