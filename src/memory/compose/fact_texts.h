// The store reads and encodes that serving memory repeats, cached for the engine thread:
//
//   facts      the facts retrievals read, by fact id, served only to their own tenant and user
//              (ids are per tenant): a retrieval reads from the store only the hits not here (the
//              fetch took ~0.1-0.25 ms of a request's preparation on the CPU at k = 5-50,
//              bench_memory_prepare); the facts encoding reads go in too (remember), so the first
//              request after a fact's encoding does not fetch it; emptied past kMaxFactRows facts
//              or kMaxFactBytes of text
//   tokens     each fact's rendered tokens (no BOS), valid for the cached version; its KV is
//              computed from exactly these
//   windows    per (fact key, version, w): the tokens a fact is encoded after ([the block's
//              opening][the w preceding facts' tokens]) and their hash (the pool key's
//              window_hash): saves a store query per retrieved fact per request (k = 50: ~1 ms of
//              a ~7 ms TTFT on the GPU)
//   frames     the encodes of prompt text before the facts (prompt_layout.h's EncodeCache):
//              requests' and the block's opening; the text names the user, so an entry a user
//              (and template, system prompt): room for a busy server's users (~0.5 KB an entry)
//
// Invalidation: every add, update, delete or reset anywhere in the store calls store_changed()
// (the store's listener thread, before the write's call returns), which moves an epoch; the first
// use of the fact or window cache after that empties both (drop_stale), so a deleted fact's text
// leaves memory then. Tokens follow a fact's version, and forget() drops those of deleted facts.
// tokens and windows hold at most max_cached entries each (emptied and refilled on demand).
#pragma once
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "memory/compose/prompt_layout.h"
#include "memory/retrieval/retriever.h"
#include "memory/store/fact_store.h"
#include "model/model.h"

namespace inferscale {

struct FactTextOptions {
  std::string fact_template;  // compose.h's render_fact
  std::string header, footer;  // the block around the facts (FactsBlock::for_user)
  bool sink = false;           // the block's opening starts with BOS
  size_t max_cached = size_t{1} << 18;  // entries of the tokens cache, and of the windows cache
};

class FactTexts {
 public:
  FactTexts(const FactStore& store, const Model& model, FactTextOptions opts)
      : store_(store), model_(model), opts_(std::move(opts)) {}

  // Any thread: the store changed; cached reads are dropped at their next use.
  void store_changed() { store_epoch_.fetch_add(1); }

  // The rest: engine thread only.
  std::vector<int32_t> tokens(const Fact& f);
  struct Window {
    int64_t version = 0;
    int32_t w = 0;
    std::vector<int32_t> tokens;  // [block_opening(user)][the w preceding facts' tokens]
    uint64_t hash = 0;            // XXH3 of tokens
  };
  // A fact's window, read from the store on a miss (by the fact as read at retrieval: it may have
  // been deleted since, and is then served as read).
  const Window& window(const Fact& f, int32_t w);
  // The prompt of a request with memory up to its first fact, for a user and an empty
  // conversation: the chat template's start and default system prompt and the block's header
  // (prompt_layout.h; [BOS][header] for a model without a chat template), BOS first with sink.
  // Every fact is encoded after it, so its KV has seen what it is served after.
  std::vector<int32_t> block_opening(const std::string& user);
  // fetch_hits (retriever.h) through the fact cache: hits the store no longer has are dropped.
  std::vector<FactHit> fetch_hits(const std::string& tenant, const std::string& user, std::span<const ScoredFact> hits);
  // Facts just read from the store (after drop_stale) go into the fact cache.
  void remember(std::span<const Fact> facts);
  // Empties the fact and window caches if the store changed since they were filled. Call it
  // before store reads whose results go into them.
  void drop_stale();
  void forget(int64_t fact_key) { tokens_.erase(fact_key); }
  void forget_all() { tokens_.clear(); }
  EncodeCache& frames() { return frames_; }

  size_t num_token_entries() const { return tokens_.size() + windows_.size(); }
  size_t num_facts() const { return facts_.size(); }
  size_t fact_bytes() const { return fact_bytes_; }
  static constexpr size_t kMaxFactRows = size_t{1} << 14;
  static constexpr size_t kMaxFactBytes = size_t{64} << 20;

 private:
  void make_room_for_facts();
  void insert_fact(Fact f);

  const FactStore& store_;
  const Model& model_;
  const FactTextOptions opts_;
  std::unordered_map<int64_t, std::pair<int64_t, std::vector<int32_t>>> tokens_;  // key -> (version, tokens)
  std::unordered_map<int64_t, Window> windows_;
  std::unordered_map<int64_t, Fact> facts_;
  size_t fact_bytes_ = 0;
  EncodeCache frames_{4096};
  uint64_t cache_epoch_ = 0;
  std::atomic<uint64_t> store_epoch_{0};
};

}  // namespace inferscale
