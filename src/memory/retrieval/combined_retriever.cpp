#include "memory/retrieval/combined_retriever.h"

#include "util/check.h"

namespace inferscale {

CombinedRetriever::CombinedRetriever(FactStore& store, std::unique_ptr<Retriever> text, VectorIndexFactory make_index)
    : text_(std::move(text)), client_(make_client_vector_retriever(store, std::move(make_index))) {
  IS_CHECK(text_ != nullptr, "no text retriever");
}

std::vector<ScoredFact> CombinedRetriever::search(std::string_view tenant, std::string_view user,
                                                  std::string_view query, size_t k) const {
  return text_->search(tenant, user, query, k);
}

std::vector<ScoredFact> CombinedRetriever::search_vector(std::string_view tenant, std::string_view user,
                                                         std::span<const float> query, size_t k) const {
  return client_->search_vector(tenant, user, query, k);
}

}  // namespace inferscale
