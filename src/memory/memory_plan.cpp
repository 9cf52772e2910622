// MemoryService as the engine's memory connector (engine/memory_connector.h): a request's memory
// planned at admission, its missing facts encoded as capture work inside the engine's steps.
//
//   plan #1   retrieve (refresh, sync first); nothing to inject -> kReady
//   plan #n   reserve the facts: found entries pinned, files read, the rest allocated pending
//               jobs        -> kEncode (one capture per fact; captures_finished marks it ready, or drops it)
//               read files  -> kWait  (write_loads, before the next scheduling, puts them in the pool)
//               pending     -> kWait  (its own captures, or another request's, still in flight)
//               all written -> kReady (prepare() composes over the same retrieval)
//               no room     -> kReady as text (MemoryPrompt::fallback)
#include "memory/memory_service.h"
#include "util/check.h"

namespace inferscale {

MemoryPlan MemoryService::plan(RequestMemory& m) {
  if (!m.retrieved) {
    store_.refresh();  // other processes' writes reach the retriever's indexes and the pool first
    sync();
    m.retrieval = retrieve(m.request, m.source);
    m.retrieved = true;
    m.retrieved_at = std::chrono::steady_clock::now();
    if (m.request.mode != MemoryMode::kInject || m.retrieval.hits.empty()) return ready(m);
  }
  if (*m.in_flight > 0) return MemoryPlan::wait();
  std::vector<Fact> facts;
  for (const FactHit& h : m.retrieval.hits) facts.push_back(h.fact);
  Reservation r;
  try {
    MemoryPrompt stats;
    r = reserve(facts, window_of(m.request), &stats, m.pins);
    m.loaded += stats.loaded;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kResource) throw;
    m.fallback = e.what();  // reserve unpinned everything: the request holds nothing now
    return ready(m);
  }
  if (r.jobs.empty()) return r.pending > 0 || r.staged > 0 ? MemoryPlan::wait() : ready(m);
  MemoryPlan plan;
  plan.state = MemoryPlan::State::kEncode;
  m.encoded += static_cast<int32_t>(r.jobs.size());
  plan.encode = captures_of(r, m.in_flight, /*background=*/false);
  return plan;
}

MemoryPlan MemoryService::ready(RequestMemory& m) {
  MemoryPrompt& p = m.served;
  if (!m.fallback.empty()) {
    // Mode text over the same retrieval: the tokens are the same either way.
    MemoryRequest text = m.request;
    text.mode = MemoryMode::kText;
    p = prepare(text, m.source, &m.retrieval);
    p.fallback = m.fallback;
  } else {
    // Every fact is resident and pinned by this request: prepare() finds them all, encodes
    // nothing, and its pins are the request's.
    const bool injects = !m.pins.empty();
    p = prepare(m.request, m.source, &m.retrieval, &m.pins);
    if (injects)
      p.kv_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m.retrieved_at).count();
  }
  p.encoded += m.encoded;
  p.loaded += m.loaded;
  MemoryPlan plan;
  plan.prompt = p.tokens;
  plan.injected = p.injected;
  if (m.fit) plan.max_tokens = m.fit(static_cast<int64_t>(p.tokens.size()));
  return plan;
}

void MemoryService::request_finished(RequestMemory& m) {
  for (const FactKvKey& k : m.pins) pool_.unpin(k);  // not ready yet: the request's own
  m.pins.clear();
  release(m.served);
  m.served.pins.clear();
}

}  // namespace inferscale
