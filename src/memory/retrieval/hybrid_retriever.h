// Hybrid retrieval: BM25 and dense rankings of the same user's facts fused by reciprocal rank
// fusion (rank_fusion.h).
//
//   query -> lexical.search(depth) --+
//                                     +-> rrf_fuse(k_rrf) -> top k
//   query -> dense.search(depth)   --+
//
// depth = max(k, candidate_depth): each retriever contributes its `depth` best. Documents below
// that depth in one ranking count as absent from it. The default depth, 100, is 2x the largest k
// the benchmark asks for (50) and about a sixth of a LoCoMo conversation (~600 turns); searching
// deeper costs a few microseconds per candidate and changes the fused top 50 little (RRF gives the
// 100th rank 1/160, 0.38 of the first's 1/61).
#pragma once
#include <memory>
#include <string>

#include "memory/retrieval/rank_fusion.h"
#include "memory/retrieval/retriever.h"

namespace inferscale {

struct HybridParams {
  double k_rrf = kRrfK;
  size_t candidate_depth = 100;
};

class HybridRetriever final : public Retriever {
 public:
  HybridRetriever(std::unique_ptr<Retriever> lexical, std::unique_ptr<Retriever> dense, HybridParams params = {});

  // "hybrid:" + the two names joined by '+' ("hybrid:bm25+dense:<embedder>").
  std::string name() const override;
  std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                 size_t k) const override;
  // The options go to both sides (the lexical one takes the neighbour weight).
  std::vector<ScoredFact> search_with(std::string_view tenant, std::string_view user, std::string_view query,
                                      size_t k, const SearchOptions& opts) const override;
  void refresh(std::string_view tenant, std::string_view user) const override;

  Retriever& lexical() const { return *lexical_; }
  Retriever& dense() const { return *dense_; }
  const HybridParams& params() const { return params_; }

 private:
  std::unique_ptr<Retriever> lexical_, dense_;
  HybridParams params_;
};

}  // namespace inferscale
