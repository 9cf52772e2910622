#include "memory/retrieval/dense_retriever.h"

#include "util/check.h"

namespace inferscale {

DenseRetriever::DenseRetriever(FactStore& store, std::shared_ptr<Embedder> embedder, size_t batch,
                               VectorIndexFactory make_index)
    : store_(store), embedder_(std::move(embedder)), batch_(batch) {
  IS_CHECK(embedder_ != nullptr, "null embedder");
  IS_REQUIRE(batch_ > 0, kInvalidInput, "embedding batch must be positive");
  vectors_ = make_dense_retriever(store_, embedder_, std::move(make_index));  // attaches first: indexes the stored vectors
  store_.attach(this);                                 // replays every user as added: all dirty
}

DenseRetriever::~DenseRetriever() { store_.detach(this); }

void DenseRetriever::mark(std::string_view tenant, std::string_view user) {
  std::lock_guard<std::mutex> lock(dirty_mu_);
  ++dirty_[UserKey(tenant, user)];
}

void DenseRetriever::on_facts_added(std::span<const Fact> facts) {
  if (!facts.empty()) mark(facts.front().tenant, facts.front().user);
}

void DenseRetriever::on_fact_updated(const Fact& fact, bool text_changed) {
  if (text_changed) mark(fact.tenant, fact.user);  // the store dropped the old text's vector
}

size_t DenseRetriever::catch_up(const UserKey& key, Progress* progress) const {
  {
    std::lock_guard<std::mutex> lock(dirty_mu_);
    if (!dirty_.count(key)) return 0;
  }
  std::lock_guard<std::mutex> embedding(embed_mu_);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(dirty_mu_);
    auto it = dirty_.find(key);
    if (it == dirty_.end()) return 0;  // caught up by another thread while we waited
    generation = it->second;
  }
  // Throws with the user still dirty: the next search or refresh tries again.
  const size_t stored = embed_missing(store_, *embedder_, key.first, key.second, batch_, progress);
  // Clean only when nothing was added or edited while embedding (else that one is still missing).
  std::lock_guard<std::mutex> lock(dirty_mu_);
  auto it = dirty_.find(key);
  if (it != dirty_.end() && it->second == generation) dirty_.erase(it);
  return stored;
}

void DenseRetriever::refresh(std::string_view tenant, std::string_view user) const {
  catch_up(UserKey(tenant, user), nullptr);
}

size_t DenseRetriever::refresh_all(Progress* progress) {
  std::vector<UserKey> users;
  {
    std::lock_guard<std::mutex> lock(dirty_mu_);
    for (const auto& [key, gen] : dirty_) users.push_back(key);
  }
  size_t stored = 0;
  for (const UserKey& key : users) stored += catch_up(key, progress);
  return stored;
}

size_t DenseRetriever::missing(std::string_view tenant, std::string_view user) const {
  const size_t facts = store_.count(tenant, user), indexed = vectors_->indexed(tenant, user);
  return facts > indexed ? facts - indexed : 0;
}

std::vector<ScoredFact> DenseRetriever::search(std::string_view tenant, std::string_view user, std::string_view query,
                                               size_t k) const {
  catch_up(UserKey(tenant, user), nullptr);
  return vectors_->search(tenant, user, query, k);
}

}  // namespace inferscale
