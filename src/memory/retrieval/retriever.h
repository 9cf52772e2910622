// Retrieval: the top-k facts of one user for a query. Every implementation ranks by score
// descending and breaks ties by fact id ascending, so results are deterministic.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {

class FactStore;

struct ScoredFact {
  int64_t id = 0;
  double score = 0.0;
  bool operator==(const ScoredFact&) const = default;
};

// The ranking order: higher score first, then lower id.
inline bool ranks_before(const ScoredFact& a, const ScoredFact& b) {
  return a.score != b.score ? a.score > b.score : a.id < b.id;
}

// Keeps the k best of `all` in ranking order (partial sort: O(n log k)).
void keep_top_k(std::vector<ScoredFact>& all, size_t k);

// A retrieved fact with its score.
struct FactHit {
  Fact fact;
  double score = 0.0;
};
// The facts behind `hits`, in ranking order, from one store query; a hit whose fact is gone
// (deleted since the search) is dropped.
std::vector<FactHit> fetch_hits(const FactStore& store, std::string_view tenant, std::string_view user,
                                std::span<const ScoredFact> hits);

// Per-search choices beyond the query; a negative value takes the retriever's default.
struct SearchOptions {
  double neighbours = -1;  // NeighbourRetriever's weight (neighbour_retriever.h); 0: off
};

class Retriever {
 public:
  virtual ~Retriever() = default;
  // A short name for logs and settings ("bm25", "dense:<embedder>", "client").
  virtual std::string name() const = 0;
  // The (at most) k best facts of (tenant, user) for `query`, in ranking order. Never returns
  // another user's facts; an unknown user has none. Thread-safe with the store's writers.
  virtual std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                         size_t k) const = 0;
  // The same with per-search choices; retrievers that have none ignore them.
  virtual std::vector<ScoredFact> search_with(std::string_view tenant, std::string_view user, std::string_view query,
                                              size_t k, const SearchOptions& opts) const {
    return search(tenant, user, query, k);
  }
  // The same for a query vector the client computed ([dim], matched against the vectors the client
  // supplied with the facts). kUnsupported unless the retriever holds client vectors;
  // kInvalidInput when the dim differs from the user's vectors.
  virtual std::vector<ScoredFact> search_vector(std::string_view tenant, std::string_view user,
                                                std::span<const float> query, size_t k) const;
  // Does now whatever work the user's next search would otherwise do first to see the store's
  // latest facts (a dense retriever embeds the facts that have no vector yet). Writers call it
  // after adding or editing facts, so that work runs on their thread. Thread-safe; no-op by default.
  virtual void refresh(std::string_view tenant, std::string_view user) const {}
};

}  // namespace inferscale
