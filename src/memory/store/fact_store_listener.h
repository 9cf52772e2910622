// Change notifications from FactStore to the in-memory structures that mirror it (BM25 index,
// vector indexes, the fact-KV pool). The database is the source of truth; a listener is a
// cache of it that FactStore keeps in step.
//
// Contract:
//   - Events arrive after the change has committed, while the store's mutex is held, in commit
//     order, for this process's writes and (at FactStore::refresh) for other processes' writes to
//     the same data directory, replayed from the change log. So a listener sees the committed
//     history, and the lock order is always store -> listener: a listener must never call back
//     into the store.
//   - A replayed event carries the fact as it is now, so it may repeat what a listener already
//     knows (an add of a fact since updated, then that update): handlers must be idempotent.
//   - FactStore::attach replays the current contents (on_facts_added per user, then
//     on_embeddings_put) before any live event, atomically with respect to writers.
//   - Listeners should not throw: the change is already durable. The store logs what a listener
//     throws and carries on.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {

// Where facts a listener is told of come from.
enum class ChangeSource {
  kThisProcess,   // a write of this FactStore (through this server)
  kOtherProcess,  // another process's write, replayed from the change log (FactStore::refresh)
  kContents,      // the store's contents, replayed at attach or after a reset
};

class FactStoreListener {
 public:
  virtual ~FactStoreListener() = default;

  // New facts of one user, ascending by id.
  virtual void on_facts_added(std::span<const Fact> facts) {}
  // The same with where they come from, for listeners that treat the writes of this process
  // apart (the memory service encodes in the background only the facts written through its own
  // server: with user-affine routing, the replica that serves the user). Calls the one above.
  virtual void on_facts_added(std::span<const Fact> facts, ChangeSource source) { on_facts_added(facts); }
  // A fact after an update. When the text changed, the store has dropped the fact's embeddings.
  virtual void on_fact_updated(const Fact& fact, bool text_changed) {}
  // Facts removed (with their embeddings): their ids and, in the same order, their keys (fact.h).
  virtual void on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                                std::span<const int64_t> keys) {}
  // Vectors written for one user and embedder: ids and a row-major [ids.size(), dim] matrix.
  virtual void on_embeddings_put(std::string_view tenant, std::string_view user, std::string_view embedder,
                                 std::span<const int64_t> ids, std::span<const float> data, int32_t dim) {}
  // The store lost track of other processes' changes (it fell behind the change log's retention):
  // forget everything; a replay of the whole contents (as at attach) follows at once.
  virtual void on_reset() {}
};

}  // namespace inferscale
