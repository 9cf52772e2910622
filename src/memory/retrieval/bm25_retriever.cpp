#include "memory/retrieval/bm25_retriever.h"

#include <mutex>

#include "memory/compose/compose.h"

namespace inferscale {

std::string bm25_document(const Fact& fact) {
  return render_fact("{speaker} {text} {date}", fact.text, fact.source.speaker, fact.timestamp);
}

Bm25Retriever::Bm25Retriever(FactStore& store, Bm25Params params) : store_(store), params_(params) {
  store_.attach(this);
}

Bm25Retriever::~Bm25Retriever() { store_.detach(this); }

std::vector<ScoredFact> Bm25Retriever::search(std::string_view tenant, std::string_view user, std::string_view query,
                                              size_t k) const {
  std::shared_lock lock(mu_);
  auto it = users_.find(user_map_key(tenant, user));
  if (it == users_.end()) return {};
  return it->second.search(query, k);
}

size_t Bm25Retriever::indexed(std::string_view tenant, std::string_view user) const {
  std::shared_lock lock(mu_);
  auto it = users_.find(user_map_key(tenant, user));
  return it == users_.end() ? 0 : it->second.size();
}

void Bm25Retriever::on_facts_added(std::span<const Fact> facts) {
  std::unique_lock lock(mu_);
  Bm25Index* index = nullptr;
  std::string current;
  for (const Fact& f : facts) {
    std::string key = user_map_key(f.tenant, f.user);
    if (index == nullptr || key != current) {
      index = &users_.try_emplace(key, params_).first->second;
      current = std::move(key);
    }
    index->put(f.id, bm25_document(f));
  }
}

void Bm25Retriever::on_fact_updated(const Fact& fact, bool text_changed) {
  if (!text_changed) return;
  std::unique_lock lock(mu_);
  users_.try_emplace(user_map_key(fact.tenant, fact.user), params_).first->second.put(fact.id, bm25_document(fact));
}

void Bm25Retriever::on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                                     std::span<const int64_t>) {
  std::unique_lock lock(mu_);
  auto it = users_.find(user_map_key(tenant, user));
  if (it == users_.end()) return;
  for (int64_t id : ids) it->second.remove(id);
  if (it->second.size() == 0) users_.erase(it);
}

void Bm25Retriever::on_reset() {
  std::unique_lock lock(mu_);
  users_.clear();
}

}  // namespace inferscale
