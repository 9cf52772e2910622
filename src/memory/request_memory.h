// One request's memory, held once from its submission to the connector's request_finished
// (engine/memory_connector.h): what was asked, how far the memory service got, and what was
// served. The engine carries it without looking inside; the memory service (the engine's
// connector) works on it on the engine thread; the submitter (the server, `chat`, a benchmark)
// fills `request`, `source` and `fit` before add_memory_request and reads `served` once the
// engine's outputs said the request was admitted (RequestOutput::admitted).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory_connector.h"
#include "engine/request.h"
#include "memory/compose/compose.h"
#include "memory/compose/prompt_layout.h"
#include "memory/kv/kv_pool.h"
#include "memory/retrieval/retriever.h"
#include "memory/store/fact.h"

namespace inferscale {

// The prompt of a request with memory and what building it took.
struct MemoryPrompt {
  std::vector<int32_t> tokens;
  std::optional<InjectedSpan> injected;  // inject mode with at least one fact
  std::vector<Fact> facts;               // in placement order
  std::vector<double> scores;            // retrieval score of each placed fact
  std::vector<FactKvKey> pins;           // pool entries pinned until released (the request's)
  int32_t recomputed = 0;                // span tokens recomputed at serving time (memory.recompute)
  int32_t encoded = 0;                   // facts encoded for this request
  int32_t loaded = 0;                    // facts read from KV files
  double retrieve_ms = 0;
  double kv_ms = 0;                      // encoding + loading
  // Mode inject served as text: why the facts' KV could not be made resident (the memory pool is
  // too small for them or pinned by running requests, the KV cache has no room to encode them,
  // the disk is full). Empty when nothing fell back. The tokens are the same either way.
  std::string fallback;
};

// A request's retrieval: the facts its prompt places, best-ranked first, and its time.
struct FactRetrieval {
  std::vector<FactHit> hits;
  double ms = 0;
};

struct RequestMemory {
  // Asked, by the submitter; read-only once submitted.
  MemoryRequest request;
  PromptSource source;
  // The submitter's rule for the request's max_tokens, given the composed prompt's length (the
  // server fits it to the context); what it throws rejects the request. Empty: as submitted.
  std::function<int32_t(int64_t prompt_tokens)> fit;

  // Served: written on the engine thread before the admitted output, read-only after it (except
  // served.pins, which the engine thread releases when the request ends; the submitter never
  // reads them).
  MemoryPrompt served;

  // The memory service's progress (engine thread only).
  bool retrieved = false;
  FactRetrieval retrieval;
  std::chrono::steady_clock::time_point retrieved_at;
  std::vector<FactKvKey> pins;  // held while its facts are made resident; served.pins once ready
  std::shared_ptr<int32_t> in_flight = std::make_shared<int32_t>(0);  // its captures not yet finished
  int32_t encoded = 0;
  int32_t loaded = 0;
  std::string fallback;  // why mode inject is served as text, once known
  // The attention selector's probe (memory/compose/recompute.h): set once m.served is composed
  // and the probe is asked for; its result is in once the engine has run it.
  std::shared_ptr<ProbeResult> probe;

  RequestMemory(MemoryRequest req, PromptSource src) : request(std::move(req)), source(std::move(src)) {}
};

}  // namespace inferscale
