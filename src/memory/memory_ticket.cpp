// MemoryService::Ticket: a request's memory resolved at admission, its missing facts encoded as
// capture work inside the engine's steps (engine/memory_connector.h).
//
//   resolve #1   retrieve (refresh, sync first); nothing to inject -> kReady
//   resolve #n   reserve the facts: found entries pinned, files loaded, the rest allocated pending
//                  jobs        -> kEncode (one capture per fact; done marks it ready, or drops it)
//                  pending     -> kWait  (its own captures, or another ticket's, still in flight)
//                  all written -> kReady (prepare() composes over the same retrieval)
//                  no room     -> kReady as text (MemoryPrompt::fallback)
#include "memory/memory_service.h"
#include "util/check.h"

namespace inferscale {

MemoryPlan MemoryService::Ticket::resolve(Engine&) {
  if (!planned_) {
    svc_.store_.refresh();  // other processes' writes reach the retriever's indexes and the pool first
    svc_.sync();
    retrieval_ = svc_.retrieve(req_, source_);
    planned_ = true;
    planned_at_ = std::chrono::steady_clock::now();
    if (req_.mode != MemoryMode::kInject || retrieval_.hits.empty()) return ready();
  }
  if (*in_flight_ > 0) return MemoryPlan::wait();
  std::vector<Fact> facts;
  for (const FactHit& h : retrieval_.hits) facts.push_back(h.fact);
  Reservation r;
  try {
    MemoryPrompt stats;
    r = svc_.reserve(facts, svc_.window_of(req_), &stats, pins_);
    loaded_ += stats.loaded;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kResource) throw;
    fallback_ = e.what();  // reserve unpinned everything: the request holds nothing now
    return ready();
  }
  if (r.jobs.empty()) return r.pending > 0 ? MemoryPlan::wait() : ready();
  MemoryPlan plan;
  plan.state = MemoryPlan::State::kEncode;
  encoded_ += static_cast<int32_t>(r.jobs.size());
  plan.encode = svc_.captures_of(r, in_flight_, /*background=*/false);
  return plan;
}

MemoryPlan MemoryService::Ticket::ready() {
  if (!fallback_.empty()) {
    // Mode text over the same retrieval: the tokens are the same either way.
    MemoryRequest text = req_;
    text.mode = MemoryMode::kText;
    prompt_ = svc_.prepare(text, source_, &retrieval_);
    prompt_.fallback = fallback_;
  } else {
    // Every fact is resident and pinned by this ticket: prepare() finds them all, encodes nothing,
    // and its pins are the ticket's.
    const bool injects = !pins_.empty();
    prompt_ = svc_.prepare(req_, source_, &retrieval_, &pins_);
    if (injects)
      prompt_.kv_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - planned_at_).count();
  }
  prompt_.encoded += encoded_;
  prompt_.loaded += loaded_;
  MemoryPlan plan;
  plan.prompt = prompt_.tokens;
  plan.injected = prompt_.injected;
  return plan;
}

void MemoryService::Ticket::release() {
  for (const FactKvKey& k : pins_) svc_.pool_.unpin(k);  // not ready yet: the ticket's own
  pins_.clear();
  svc_.release(prompt_);
  prompt_.pins.clear();
}

}  // namespace inferscale
