// Hybrid retrieval: reciprocal rank fusion on hand-built rankings, the hybrid retriever over a
// real store (BM25 + dense over a hashing embedder), and the re-embed rule: vectors are kept per
// embedder identity, so a different embedder embeds every fact again instead of searching
// vectors of another space.
#include <gtest/gtest.h>

#include <array>

#include "hashing_embedder.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/retrieval/dense_retriever.h"
#include "memory/retrieval/hybrid_retriever.h"
#include "memory/retrieval/rank_fusion.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::expect_error;
using inferscale::testing::HashingEmbedder;
using inferscale::testing::TempDir;

namespace {

std::vector<ScoredFact> ranking(std::initializer_list<int64_t> ids) {
  std::vector<ScoredFact> out;
  double score = 100.0;  // any decreasing scores: fusion reads ranks only
  for (const int64_t id : ids) out.push_back(ScoredFact{id, score -= 7.5});
  return out;
}

std::vector<int64_t> ids_of(const std::vector<ScoredFact>& hits) {
  std::vector<int64_t> out;
  for (const ScoredFact& h : hits) out.push_back(h.id);
  return out;
}

}  // namespace

TEST(RrfFuse, HandBuiltRankings) {
  const std::array<std::vector<ScoredFact>, 2> r = {ranking({1, 2, 3}), ranking({3, 4, 1})};
  const auto fused = rrf_fuse(r, 10);
  // 1: 1/61 + 1/63, 3: 1/63 + 1/61 (a tie: lower id first), 2 and 4: 1/62 each.
  EXPECT_EQ(ids_of(fused), (std::vector<int64_t>{1, 3, 2, 4}));
  EXPECT_DOUBLE_EQ(fused[0].score, 1.0 / 61 + 1.0 / 63);
  EXPECT_DOUBLE_EQ(fused[1].score, fused[0].score);
  EXPECT_DOUBLE_EQ(fused[2].score, 1.0 / 62);
  EXPECT_EQ(ids_of(rrf_fuse(r, 2)), (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(rrf_fuse(r, 0).empty());
}

TEST(RrfFuse, AgreementBeatsOneFirstPlace) {
  // The example of rank_fusion.h: 9 is first in one ranking only; 5 is 5th and 6th.
  const std::array<std::vector<ScoredFact>, 2> r = {ranking({9, 10, 11, 12, 5, 13}), ranking({20, 21, 22, 23, 24, 5})};
  const auto fused = rrf_fuse(r, 3);
  EXPECT_EQ(fused[0].id, 5);
  EXPECT_DOUBLE_EQ(fused[0].score, 1.0 / 65 + 1.0 / 66);
  EXPECT_EQ(fused[1].id, 9);   // 1/61, ahead of 20 (also 1/61) by id
  EXPECT_EQ(fused[2].id, 20);
  // k_rrf = 0: plain reciprocal ranks, the head dominates.
  EXPECT_EQ(rrf_fuse(r, 1, 0.0)[0].id, 9);
}

TEST(RrfFuse, OneRankingKeepsItsOrderAndBadInputIsRefused) {
  const std::array<std::vector<ScoredFact>, 1> one = {ranking({7, 3, 5})};
  EXPECT_EQ(ids_of(rrf_fuse(one, 5)), (std::vector<int64_t>{7, 3, 5}));
  const std::array<std::vector<ScoredFact>, 2> none = {};
  EXPECT_TRUE(rrf_fuse(none, 5).empty());
  const std::array<std::vector<ScoredFact>, 1> twice = {ranking({1, 2, 1})};
  expect_error([&] { rrf_fuse(twice, 5); }, ErrorKind::kInvalidInput, "twice");
  expect_error([&] { rrf_fuse(one, 5, -1.0); }, ErrorKind::kInvalidInput, "RRF constant");
}

TEST(HybridRetriever, FusesBm25AndDenseAtTheCandidateDepth) {
  TempDir dir;
  auto store = FactStore::open(dir.path());
  const std::vector<std::string> texts = {"the cat sat on the mat",      "dogs chase the cat",   "stock markets fell today",
                                          "a recipe for apple pie",      "the weather is sunny", "cat food recipe",
                                          "markets and cats and weather"};
  std::vector<NewFact> facts;
  for (const auto& t : texts) facts.push_back(NewFact{t, {}, {}, {}, {}});
  store->add_facts("default", "u", facts);
  store->add_facts("default", "v", facts);
  auto emb = std::make_shared<HashingEmbedder>(32);
  // Separate retrievers over the same store give the reference rankings.
  Bm25Retriever bm25(*store);
  DenseRetriever dense(*store, emb);
  for (const size_t depth : {size_t{1}, size_t{3}, size_t{100}}) {
    HybridRetriever hybrid(std::make_unique<Bm25Retriever>(*store), std::make_unique<DenseRetriever>(*store, emb),
                           HybridParams{60.0, depth});
    EXPECT_EQ(hybrid.name(), "hybrid:bm25+dense:hash32+speaker+date");
    for (const std::string q : {"cat recipe", "weather markets", "nothing lexical matches zzz"}) {
      for (const size_t k : {size_t{1}, size_t{2}, size_t{5}}) {
        SCOPED_TRACE(q + " k " + std::to_string(k) + " depth " + std::to_string(depth));
        const size_t d = std::max(k, depth);
        const std::array<std::vector<ScoredFact>, 2> r = {bm25.search("default", "u", q, d), dense.search("default", "u", q, d)};
        EXPECT_EQ(hybrid.search("default", "u", q, k), rrf_fuse(r, k));
      }
    }
    // A query without a lexical match is ranked by the dense half alone.
    const auto only_dense = hybrid.search("default", "u", "zzz", 3);
    EXPECT_EQ(ids_of(only_dense), ids_of(dense.search("default", "u", "zzz", 3)));
  }
  HybridRetriever hybrid(std::make_unique<Bm25Retriever>(*store), std::make_unique<DenseRetriever>(*store, emb));
  EXPECT_TRUE(hybrid.search("default", "nobody", "cat", 5).empty());
  EXPECT_TRUE(hybrid.search("default", "u", "cat", 0).empty());
  // Every hit is the user's: v has the same texts under its own ids.
  const auto v_ids = store->list("default", "v");
  for (const ScoredFact& h : hybrid.search("default", "v", "cat", 10))
    EXPECT_TRUE(std::any_of(v_ids.begin(), v_ids.end(), [&](const Fact& f) { return f.id == h.id; }));
  expect_error([&] { HybridRetriever(std::make_unique<Bm25Retriever>(*store), std::make_unique<Bm25Retriever>(*store),
                                     HybridParams{60.0, 0}); },
               ErrorKind::kInvalidInput, "depth");
}

TEST(DenseRetriever, AnotherEmbedderReembedsInsteadOfMixingVectorSpaces) {
  TempDir dir;
  const std::vector<std::string> texts = {"red bicycle", "green kayak", "blue bicycle bell", "yellow tent"};
  std::vector<NewFact> facts;
  for (const auto& t : texts) facts.push_back(NewFact{t, {}, {}, {}, {}});
  {
    auto store = FactStore::open(dir.path());
    store->add_facts("default", "u", facts);
    auto a = std::make_shared<HashingEmbedder>(16, ":a");
    DenseRetriever dense(*store, a);
    EXPECT_EQ(dense.refresh_all(), texts.size());
    EXPECT_EQ(a->embedded, texts.size());
  }
  auto store = FactStore::open(dir.path());
  // Same identity after a restart: nothing to embed.
  {
    auto a = std::make_shared<HashingEmbedder>(16, ":a");
    DenseRetriever dense(*store, a);
    EXPECT_EQ(dense.refresh_all(), 0u);
    EXPECT_EQ(a->embedded, 0u);
  }
  // Another identity (another model or pooling: another name): every fact embedded again, and
  // searches see only the new space (a's vectors stay under a's name, unused).
  auto b = std::make_shared<HashingEmbedder>(16, ":b");
  DenseRetriever dense_b(*store, b);
  EXPECT_EQ(dense_b.missing("default", "u"), texts.size());
  EXPECT_EQ(dense_b.refresh_all(), texts.size());
  EXPECT_EQ(b->embedded, texts.size());
  EXPECT_EQ(store->embeddings("default", "u", "hash16:a+speaker+date").ids.size(), texts.size());
  EXPECT_EQ(store->embeddings("default", "u", "hash16:b+speaker+date").ids.size(), texts.size());
  EXPECT_EQ(dense_b.vectors().indexed("default", "u"), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto hits = dense_b.search("default", "u", texts[i], 1);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_NEAR(hits[0].score, 1.0, 1e-5) << texts[i];  // b's query against b's vector of the same text
  }
  // A text edit drops the fact's vectors of every identity; only the searching one re-embeds it.
  const auto listed = store->list("default", "u");
  store->update("default", "u", listed[1].id, FactUpdate{std::string("orange canoe"), {}});
  const size_t before = b->embedded;  // (queries count too: embed_query embeds one text)
  dense_b.refresh("default", "u");
  EXPECT_EQ(b->embedded, before + 1);
  EXPECT_EQ(dense_b.search("default", "u", "orange canoe", 1).at(0).id, listed[1].id);
  EXPECT_EQ(store->embeddings("default", "u", "hash16:a+speaker+date").ids.size(), texts.size() - 1);
}
