#include "memory/retrieval/hybrid_retriever.h"

#include <algorithm>
#include <array>

#include "util/check.h"

namespace inferscale {

HybridRetriever::HybridRetriever(std::unique_ptr<Retriever> lexical, std::unique_ptr<Retriever> dense,
                                 HybridParams params)
    : lexical_(std::move(lexical)), dense_(std::move(dense)), params_(params) {
  IS_CHECK(lexical_ != nullptr && dense_ != nullptr, "hybrid retrieval needs two retrievers");
  IS_REQUIRE(params_.k_rrf >= 0.0, kInvalidInput, "the RRF constant must be >= 0, got {}", params_.k_rrf);
  IS_REQUIRE(params_.candidate_depth > 0, kInvalidInput, "the hybrid candidate depth must be positive");
}

std::string HybridRetriever::name() const { return "hybrid:" + lexical_->name() + "+" + dense_->name(); }

std::vector<ScoredFact> HybridRetriever::search(std::string_view tenant, std::string_view user, std::string_view query,
                                                size_t k) const {
  return search_with(tenant, user, query, k, SearchOptions{});
}

std::vector<ScoredFact> HybridRetriever::search_with(std::string_view tenant, std::string_view user,
                                                     std::string_view query, size_t k, const SearchOptions& opts) const {
  if (k == 0) return {};
  const size_t depth = std::max(k, params_.candidate_depth);
  const std::array<std::vector<ScoredFact>, 2> rankings = {lexical_->search_with(tenant, user, query, depth, opts),
                                                           dense_->search_with(tenant, user, query, depth, opts)};
  return rrf_fuse(rankings, k, params_.k_rrf);
}

void HybridRetriever::refresh(std::string_view tenant, std::string_view user) const {
  lexical_->refresh(tenant, user);
  dense_->refresh(tenant, user);
}

}  // namespace inferscale
