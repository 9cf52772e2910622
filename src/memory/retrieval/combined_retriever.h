// The server's retriever: text queries go to the configured text retriever (BM25, or dense over an
// embedding model), query vectors to the vectors the client supplied with the facts
// (kClientEmbedder). Both follow the same store, so a request may use either without a restart.
#pragma once
#include <memory>

#include "memory/store/fact_store.h"
#include "memory/retrieval/retriever.h"
#include "memory/retrieval/vector_retriever.h"

namespace inferscale {

class CombinedRetriever final : public Retriever {
 public:
  // `store` must outlive the retriever; `make_index` holds the client vectors (CPU or GPU).
  CombinedRetriever(FactStore& store, std::unique_ptr<Retriever> text,
                    VectorIndexFactory make_index = make_cpu_vector_index);

  std::string name() const override { return text_->name(); }
  std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                 size_t k) const override;
  std::vector<ScoredFact> search_with(std::string_view tenant, std::string_view user, std::string_view query,
                                      size_t k, const SearchOptions& opts) const override {
    return text_->search_with(tenant, user, query, k, opts);
  }
  std::vector<ScoredFact> search_vector(std::string_view tenant, std::string_view user, std::span<const float> query,
                                        size_t k) const override;
  void refresh(std::string_view tenant, std::string_view user) const override { text_->refresh(tenant, user); }

  Retriever& text() const { return *text_; }

 private:
  std::unique_ptr<Retriever> text_;
  std::unique_ptr<VectorRetriever> client_;
};

}  // namespace inferscale
