// The default retriever: BM25 over each user's facts, no model needed. One Bm25Index per
// (tenant, user), built from the store when attached and kept in step by the store's change
// events (add, update, delete) afterwards.
#pragma once
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "memory/retrieval/bm25_index.h"
#include "memory/store/fact_store.h"
#include "memory/retrieval/retriever.h"

namespace inferscale {

// What BM25 indexes of a fact: its speaker, its text and its date ("Caroline I went to a support
// group yesterday 1:56 pm on 8 May, 2023"), the fields the dense retriever's document has too:
// questions name the speaker and the time, turns rarely do (docs/QUALITY.md: recall@10 on LoCoMo
// 0.643 for the text alone, 0.699 with both).
std::string bm25_document(const Fact& fact);

class Bm25Retriever final : public Retriever, private FactStoreListener {
 public:
  // Indexes every fact in `store` and follows its changes until destroyed. `store` must outlive it.
  explicit Bm25Retriever(FactStore& store, Bm25Params params = {});
  ~Bm25Retriever() override;
  Bm25Retriever(const Bm25Retriever&) = delete;
  Bm25Retriever& operator=(const Bm25Retriever&) = delete;

  std::string name() const override { return "bm25"; }
  std::vector<ScoredFact> search(std::string_view tenant, std::string_view user, std::string_view query,
                                 size_t k) const override;
  // Facts indexed for the user (equals store.count() once attached).
  size_t indexed(std::string_view tenant, std::string_view user) const;

 private:
  void on_facts_added(std::span<const Fact> facts) override;
  void on_fact_updated(const Fact& fact, bool text_changed) override;
  void on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                        std::span<const int64_t> keys) override;
  void on_reset() override;

  FactStore& store_;
  Bm25Params params_;
  mutable std::shared_mutex mu_;  // taken after the store's mutex (listener events), never before
  std::unordered_map<std::string, Bm25Index> users_;  // by user_map_key()
};

}  // namespace inferscale
