// Neighbour expansion: a retrieved conversation turn lends part of its score to the turns beside
// it, as Context-Window Encoding gives each fact the turns before it. A question's words often
// match one turn ("Did Caroline go to the support group?") while the answer is the next one
// ("Yes, last Tuesday"), or the evidence spans two turns; scoring a turn by its own match plus
// its neighbours' brings both in.
//
//   score'(f) = score(f) + weight * max(score(n) : n a neighbour of f among the candidates)
//
// over the base retriever's top max(k, kCandidates) (a neighbour outside them scores 0 of its
// own). Neighbours: the turns of the same conversation and session whose turn index differs by
// one. Free-standing facts (no turn index) have none and keep their own score. weight 0 is the
// base retriever's ranking unchanged. The weight is a fraction of the base's scores, so it suits
// a retriever whose scores separate a match from the rest (BM25); over cosine similarities or
// fused ranks, which sit close together, neighbours crowd out the matches, so the CLI wraps the
// BM25 retriever only, also inside hybrid retrieval (cli/memory_options.h). Measured on LoCoMo in
// docs/QUALITY.md ("Retrieval that finds the evidence"), where the default weight comes from.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "memory/retrieval/retriever.h"
#include "memory/store/fact_store.h"
#include "memory/store/fact_store_listener.h"

namespace inferscale {

inline constexpr double kDefaultNeighbourWeight = 0.5;

class NeighbourRetriever final : public Retriever, private FactStoreListener {
 public:
  static constexpr size_t kCandidates = 100;
  // `store` must outlive the retriever; `weight` in [0, 1] is the default of searches that give none.
  NeighbourRetriever(FactStore& store, std::unique_ptr<Retriever> base, double weight = kDefaultNeighbourWeight);
  ~NeighbourRetriever() override;
  NeighbourRetriever(const NeighbourRetriever&) = delete;
  NeighbourRetriever& operator=(const NeighbourRetriever&) = delete;

  std::string name() const override { return base_->name(); }
  std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                 size_t k) const override;
  std::vector<ScoredFact> search_with(std::string_view tenant, std::string_view user, std::string_view query,
                                      size_t k, const SearchOptions& opts) const override;
  void refresh(std::string_view tenant, std::string_view user) const override { base_->refresh(tenant, user); }

  Retriever& base() const { return *base_; }
  double weight() const { return weight_; }

 private:
  // Where a turn sits: its conversation's turns by index, and its session.
  struct Turn {
    std::string conversation, session;
    int64_t index = 0;
  };
  struct UserTurns {
    std::unordered_map<int64_t, Turn> by_id;
    std::map<std::pair<std::string, int64_t>, int64_t> by_index;  // (conversation, turn index) -> id
  };
  std::vector<ScoredFact> expand(std::string_view tenant, std::string_view user, std::vector<ScoredFact> candidates,
                                 double weight, size_t k) const;
  void on_facts_added(std::span<const Fact> facts) override;
  void on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                        std::span<const int64_t> keys) override;
  void on_reset() override;

  FactStore& store_;
  std::unique_ptr<Retriever> base_;
  double weight_;
  mutable std::shared_mutex mu_;  // taken after the store's mutex (listener events), never before
  std::unordered_map<std::string, UserTurns> users_;  // by user_map_key()
};

}  // namespace inferscale
