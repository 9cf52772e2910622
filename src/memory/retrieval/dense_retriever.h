// Dense retrieval over an Embedder that keeps the store's vectors complete: a VectorRetriever
// (make_dense_retriever) plus the bookkeeping of which users have facts without a vector.
//
//   store event (add, text edit) -> user marked dirty (generation + 1)
//   refresh(user) / search(user) -> if dirty: embed_missing() -> vectors stored -> index follows
//   refresh_all()                -> every dirty user (at open: attach replays every user as added)
//
// Vectors live in the store's embeddings table under the embedder's name, so a restart embeds
// only what is new. A search of a dirty user embeds first (waiting for an embedding already in
// progress), so it never misses a committed fact; writers call refresh() to do it on their thread.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "memory/retrieval/embedder.h"
#include "memory/store/fact_store.h"
#include "memory/retrieval/retriever.h"
#include "memory/retrieval/vector_retriever.h"

namespace inferscale {

class Progress;

class DenseRetriever final : public Retriever, private FactStoreListener {
 public:
  // `store` must outlive the retriever; `batch`: texts per embedder call; `make_index`: where the
  // users' vector indexes live (CPU, or the GPU's make_cuda_vector_index).
  DenseRetriever(FactStore& store, std::shared_ptr<Embedder> embedder, size_t batch = 32,
                 VectorIndexFactory make_index = make_cpu_vector_index);
  ~DenseRetriever() override;
  DenseRetriever(const DenseRetriever&) = delete;
  DenseRetriever& operator=(const DenseRetriever&) = delete;

  std::string name() const override { return vectors_->name(); }
  std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                 size_t k) const override;
  void refresh(std::string_view tenant, std::string_view user) const override;
  // Embeds the missing vectors of every dirty user; returns how many were stored.
  size_t refresh_all(Progress* progress = nullptr);
  // Facts of the user that have no indexed vector (0 once refreshed).
  size_t missing(std::string_view tenant, std::string_view user) const;
  const VectorRetriever& vectors() const { return *vectors_; }
  Embedder& embedder() const { return *embedder_; }

 private:
  using UserKey = std::pair<std::string, std::string>;  // (tenant, user)
  size_t catch_up(const UserKey& key, Progress* progress) const;
  void mark(std::string_view tenant, std::string_view user);
  void on_facts_added(std::span<const Fact> facts) override;
  void on_fact_updated(const Fact& fact, bool text_changed) override;

  FactStore& store_;
  std::shared_ptr<Embedder> embedder_;
  std::unique_ptr<VectorRetriever> vectors_;
  size_t batch_;
  mutable std::mutex embed_mu_;  // one catch-up at a time; held while calling the store, never inside its events
  mutable std::mutex dirty_mu_;  // taken inside store events: never held while calling the store
  mutable std::map<UserKey, uint64_t> dirty_;  // users with facts that may lack a vector -> generation
};

}  // namespace inferscale
