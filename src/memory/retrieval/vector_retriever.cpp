#include "memory/retrieval/vector_retriever.h"

#include <mutex>

#include "memory/compose/compose.h"
#include "util/check.h"
#include "util/progress.h"

namespace inferscale {

VectorRetriever::VectorRetriever(FactStore& store, std::string embedder_name,
                                 std::shared_ptr<Embedder> query_embedder, VectorIndexFactory make_index)
    : store_(store),
      embedder_name_(std::move(embedder_name)),
      query_embedder_(std::move(query_embedder)),
      make_index_(std::move(make_index)) {
  IS_REQUIRE(!query_embedder_ || vector_space(*query_embedder_) == embedder_name_, kInvalidInput,
             "query embedder '{}' differs from the indexed embedder '{}'", vector_space(*query_embedder_), embedder_name_);
  IS_CHECK(static_cast<bool>(make_index_), "no vector index factory");
  store_.attach(this);
}

VectorRetriever::~VectorRetriever() { store_.detach(this); }

std::string VectorRetriever::name() const {
  return embedder_name_ == kClientEmbedder ? std::string(kClientEmbedder) : "dense:" + embedder_name_;
}

std::vector<ScoredFact> VectorRetriever::search(std::string_view tenant, std::string_view user,
                                                std::string_view query, size_t k) const {
  IS_REQUIRE(query_embedder_ != nullptr, kUnsupported,
             "retriever '{}' has no query embedder: pass a query vector instead of text", name());
  const std::vector<float> q = query_embedder_->embed_query(query);  // outside our lock: may be slow
  return search_vector(tenant, user, q, k);
}

std::vector<ScoredFact> VectorRetriever::search_vector(std::string_view tenant, std::string_view user,
                                                       std::span<const float> query, size_t k) const {
  std::shared_lock lock(mu_);
  auto it = users_.find(user_map_key(tenant, user));
  if (it == users_.end()) return {};
  IS_REQUIRE(query.size() == static_cast<size_t>(it->second->dim()), kInvalidInput,
             "query vector has dim {}, the vectors of user '{}' have dim {}", query.size(), user, it->second->dim());
  return it->second->search(query, k);
}

size_t VectorRetriever::indexed(std::string_view tenant, std::string_view user) const {
  std::shared_lock lock(mu_);
  auto it = users_.find(user_map_key(tenant, user));
  return it == users_.end() ? 0 : it->second->size();
}

void VectorRetriever::on_fact_updated(const Fact& fact, bool text_changed) {
  if (!text_changed) return;  // the store dropped the vector: drop it here too
  const int64_t ids[1] = {fact.id}, keys[1] = {fact.key};
  on_facts_deleted(fact.tenant, fact.user, ids, keys);
}

void VectorRetriever::on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                                       std::span<const int64_t>) {
  std::unique_lock lock(mu_);
  auto it = users_.find(user_map_key(tenant, user));
  if (it == users_.end()) return;
  for (int64_t id : ids) it->second->remove(id);
  if (it->second->size() == 0) users_.erase(it);
}

void VectorRetriever::on_embeddings_put(std::string_view tenant, std::string_view user, std::string_view embedder,
                                        std::span<const int64_t> ids, std::span<const float> data, int32_t dim) {
  if (embedder != embedder_name_ || ids.empty()) return;
  std::unique_lock lock(mu_);
  auto& index = users_[user_map_key(tenant, user)];
  if (!index) index = make_index_(dim);
  IS_CHECK(index->dim() == dim, "user '{}' has vectors of dim {} and {}", user, index->dim(), dim);
  index->upsert(ids, data);
}

void VectorRetriever::on_reset() {
  std::unique_lock lock(mu_);
  users_.clear();
}

std::unique_ptr<VectorRetriever> make_client_vector_retriever(FactStore& store, VectorIndexFactory make_index) {
  return std::make_unique<VectorRetriever>(store, kClientEmbedder, nullptr, std::move(make_index));
}

std::string embedding_document(const Fact& fact) {
  return render_fact(kEmbedDocumentTemplate, fact.text, fact.source.speaker, fact.timestamp);
}

std::string vector_space(const Embedder& embedder) {
  return embedder.name() + "+speaker+date";  // the document form: embedding_document()
}

std::unique_ptr<VectorRetriever> make_dense_retriever(FactStore& store, std::shared_ptr<Embedder> embedder,
                                                      VectorIndexFactory make_index) {
  IS_CHECK(embedder != nullptr, "null embedder");
  std::string name = vector_space(*embedder);
  return std::make_unique<VectorRetriever>(store, std::move(name), std::move(embedder), std::move(make_index));
}

size_t embed_missing(FactStore& store, Embedder& embedder, std::string_view tenant, std::string_view user,
                     size_t batch, Progress* progress) {
  IS_REQUIRE(batch > 0, kInvalidInput, "embedding batch must be positive");
  const std::string name = vector_space(embedder);
  const auto dim = static_cast<size_t>(embedder.dim());
  size_t stored = 0;
  for (;;) {
    const std::vector<Fact> facts = store.facts_missing_embedding(tenant, user, name, batch);
    if (facts.empty()) break;
    std::vector<std::string> texts;
    for (const Fact& f : facts) texts.push_back(embedding_document(f));
    const std::vector<float> vecs = embedder.embed(texts);
    IS_REQUIRE(vecs.size() == facts.size() * dim, kInternal, "embedder '{}' returned {} floats for {} texts of dim {}",
               name, vecs.size(), facts.size(), dim);
    std::vector<EmbeddingRow> rows;
    for (size_t i = 0; i < facts.size(); ++i)
      rows.push_back(EmbeddingRow{facts[i].id, facts[i].version,
                                  std::vector<float>(vecs.begin() + static_cast<std::ptrdiff_t>(i * dim),
                                                     vecs.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim))});
    const size_t n = store.put_embeddings(tenant, user, name, rows);
    stored += n;
    if (progress) progress->add(static_cast<int64_t>(facts.size()));
    // Every fact of this batch changed while it was embedded: stop rather than chase a writer.
    if (n == 0) break;
  }
  return stored;
}

}  // namespace inferscale
