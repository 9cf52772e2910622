// Dense retrieval: one VectorIndex per user, mirroring the store's vectors of one embedder.
//
// The embeddings table is the source of truth; the indexes are rebuilt from it when attached and
// follow every put, text update (which drops the fact's vector) and delete. Two uses:
//   - dense: an Embedder embeds the query text (facts are embedded by embed_missing()).
//   - client vectors: vectors come with the facts (NewFact::vector, stored under kClientEmbedder)
//     and with the query (search_vector); search() with text is kUnsupported.
#pragma once
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "memory/retrieval/embedder.h"
#include "memory/store/fact_store.h"
#include "memory/retrieval/retriever.h"
#include "memory/retrieval/vector_index.h"

namespace inferscale {

class Progress;

class VectorRetriever final : public Retriever, private FactStoreListener {
 public:
  // Follows the vectors of `embedder_name`; `query_embedder` (may be null) embeds query texts and
  // must carry the same name. `store` must outlive the retriever.
  VectorRetriever(FactStore& store, std::string embedder_name, std::shared_ptr<Embedder> query_embedder,
                  VectorIndexFactory make_index = make_cpu_vector_index);
  ~VectorRetriever() override;
  VectorRetriever(const VectorRetriever&) = delete;
  VectorRetriever& operator=(const VectorRetriever&) = delete;

  std::string name() const override;
  // Embeds the query (kUnsupported without a query embedder), then search_vector().
  std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                 size_t k) const override;
  // Top-k by inner product with `query` ([dim]). kInvalidInput when the dim differs from the user's vectors.
  std::vector<ScoredFact> search_vector(std::string_view tenant, std::string_view user, std::span<const float> query,
                                        size_t k) const override;
  // Vectors indexed for the user.
  size_t indexed(std::string_view tenant, std::string_view user) const;
  const std::string& embedder_name() const { return embedder_name_; }

 private:
  void on_fact_updated(const Fact& fact, bool text_changed) override;
  void on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                        std::span<const int64_t> keys) override;
  void on_embeddings_put(std::string_view tenant, std::string_view user, std::string_view embedder,
                         std::span<const int64_t> ids, std::span<const float> data, int32_t dim) override;
  void on_reset() override;

  FactStore& store_;
  std::string embedder_name_;
  std::shared_ptr<Embedder> query_embedder_;
  VectorIndexFactory make_index_;
  mutable std::shared_mutex mu_;  // taken after the store's mutex (listener events), never before
  std::unordered_map<std::string, std::unique_ptr<VectorIndex>> users_;  // by user_map_key()
};

// What an embedder sees of a fact: the fact rendered as "[date] speaker: text" (the default
// prompt form; an empty date or speaker drops its decoration), not the bare text. Conversation
// turns rarely name their speaker or time, the questions about them do: on LoCoMo conv-26 with
// all-MiniLM-L6-v2 this lifts dense recall@10 from 0.25 to 0.65 (docs/QUALITY.md). Queries are
// embedded as they are.
inline constexpr const char* kEmbedDocumentTemplate = "[{date}] {speaker}: {text}";
std::string embedding_document(const Fact& fact);
// The name a fact's vectors are stored under: the embedder's name (model, pooling, normalization,
// length) and the document form, so a change of either embeds again instead of mixing spaces.
std::string vector_space(const Embedder& embedder);

// A retriever over the client-supplied vectors (kClientEmbedder); query with search_vector().
std::unique_ptr<VectorRetriever> make_client_vector_retriever(FactStore& store,
                                                              VectorIndexFactory make_index = make_cpu_vector_index);
// A dense retriever for `embedder`; embed the facts with embed_missing().
std::unique_ptr<VectorRetriever> make_dense_retriever(FactStore& store, std::shared_ptr<Embedder> embedder,
                                                      VectorIndexFactory make_index = make_cpu_vector_index);

// Embeds the user's facts that have no vector for `embedder` yet, `batch` texts per call, and
// stores them (skipping facts whose text changed meanwhile). Returns the number stored; adds
// each batch's count to `progress` when given. Runs the embedder without holding the store's lock.
size_t embed_missing(FactStore& store, Embedder& embedder, std::string_view tenant, std::string_view user,
                     size_t batch = 32, Progress* progress = nullptr);

}  // namespace inferscale
