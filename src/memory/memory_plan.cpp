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
//             with memory.recompute_attention > 0, composed -> kProbe (ProbeSeq: the prompt with every
//               fact injected; the attention its last token pays each fact token measured)
//   plan #n   the probe running -> kWait; dropped -> kProbe again; done -> its choice added to the
//               recompute mask (recompute.h) -> kReady
#include <xxhash.h>

#include "memory/compose/recompute.h"
#include "memory/memory_service.h"
#include "util/check.h"

namespace inferscale {

MemoryPlan MemoryService::plan(RequestMemory& m) {
  if (m.probe) return probed(m);
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
  // A span with nothing after it but the last token has no question to probe with.
  if (attention_of(m.request) > 0 && p.injected && p.injected->end + 1 < static_cast<int32_t>(p.tokens.size())) return probe(m);
  return admit(m);
}

MemoryPlan MemoryService::probe(RequestMemory& m) {
  const MemoryPrompt& p = m.served;
  m.probe = std::make_shared<ProbeResult>();
  MemoryPlan plan;
  plan.state = MemoryPlan::State::kProbe;
  // The probed row is the prompt's last token: its logits give the answer's first token.
  ProbeSeq probe{p.tokens, *p.injected, static_cast<int32_t>(p.tokens.size()) - 1,
                 probe_first_layer(model_.config.num_layers), m.probe};
  probe.injected.recompute.clear();
  plan.probe = std::move(probe);
  return plan;
}

MemoryPlan MemoryService::probed(RequestMemory& m) {
  MemoryPrompt& p = m.served;
  InjectedSpan& span = *p.injected;
  switch (m.probe->state) {
    case ProbeResult::State::kRunning: return MemoryPlan::wait();
    case ProbeResult::State::kDropped: return probe(m);
    case ProbeResult::State::kDone: {
      const double fraction = attention_of(m.request);
      std::vector<uint8_t> mask =
          span.recompute.empty() ? std::vector<uint8_t>(static_cast<size_t>(span.end - span.start), 0) : span.recompute;
      add_attention_choice(mask, m.probe->mass, fraction);
      // The blocks from the span on hold KV that depends on which tokens were recomputed.
      const uint64_t mask_hash = XXH3_64bits(mask.data(), mask.size());
      span.cache_key = (span.cache_key ^ (mask_hash * 0x9E3779B97F4A7C15ull)) | 1;
      span.recompute = std::move(mask);
      p.recomputed = span.end - span.start - span.num_injected();
      return admit(m);
    }
  }
  return MemoryPlan::wait();
}

MemoryPlan MemoryService::admit(RequestMemory& m) {
  const MemoryPrompt& p = m.served;
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
