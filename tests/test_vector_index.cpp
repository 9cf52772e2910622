// Dense retrieval: the CPU vector index against a brute-force reference (random data, ties,
// add/replace/remove), pooling + normalization of the hidden-state embedder on synthetic hidden
// states, and the store-backed vector retriever (client vectors and an embedder).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <utility>

#include "memory/retrieval/bm25_index.h"
#include "memory/retrieval/cpu_vector_index.h"
#include "memory/retrieval/dense_retriever.h"
#include "memory/retrieval/hidden_state_embedder.h"
#include "memory/retrieval/vector_retriever.h"
#include "hashing_embedder.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::expect_error;
using inferscale::testing::HashingEmbedder;
using inferscale::testing::expect_top_k;

namespace {

using Vectors = std::map<int64_t, std::vector<float>>;

// All ids in ranking order by inner product, computed in double.
std::vector<ScoredFact> reference(const Vectors& vecs, const std::vector<float>& q) {
  std::vector<ScoredFact> out;
  for (const auto& [id, v] : vecs) {
    double s = 0;
    for (size_t j = 0; j < v.size(); ++j) s += static_cast<double>(v[j]) * q[j];
    out.push_back(ScoredFact{id, s});
  }
  std::sort(out.begin(), out.end(), ranks_before);
  return out;
}

std::vector<float> random_unit(std::mt19937& rng, int dim) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(dim));
  for (float& x : v) x = d(rng);
  l2_normalize_rows(v, dim);
  return v;
}

// float sums differ from double ones by rounding only.
constexpr double kTol = 1e-5;

}  // namespace

TEST(CpuVectorIndex, MatchesBruteForceOnRandomData) {
  std::mt19937 rng(5);
  for (int dim : {1, 7, 64, 384}) {
    for (size_t n : {0, 1, 17, 1000}) {
      CpuVectorIndex idx(dim);
      Vectors vecs;
      std::vector<int64_t> ids;
      std::vector<float> data;
      for (size_t i = 0; i < n; ++i) {
        const int64_t id = static_cast<int64_t>(i * 7 + 3);
        vecs[id] = random_unit(rng, dim);
        ids.push_back(id);
        data.insert(data.end(), vecs[id].begin(), vecs[id].end());
      }
      idx.add(ids, data);
      ASSERT_EQ(idx.size(), n);
      for (int q = 0; q < 5; ++q) {
        const std::vector<float> query = random_unit(rng, dim);
        for (size_t k : {size_t{1}, size_t{5}, n + 3}) {
          expect_top_k(idx.search(query, k), reference(vecs, query), k,
                       "dim " + std::to_string(dim) + " n " + std::to_string(n) + " k " + std::to_string(k), kTol);
        }
      }
    }
  }
}

TEST(CpuVectorIndex, ExactTiesBreakByAscendingId) {
  CpuVectorIndex idx(3);
  // Small integers: every dot product is exact, so equal vectors give bit-equal scores.
  idx.add(std::vector<int64_t>{9, 4, 6, 1, 2},
          std::vector<float>{1, 2, 0, /**/ 1, 2, 0, /**/ 0, 1, 0, /**/ 1, 2, 0, /**/ 2, 2, 1});
  const auto hits = idx.search(std::vector<float>{1, 1, 0}, 10);
  ASSERT_EQ(hits.size(), 5u);
  std::vector<int64_t> order;
  for (const auto& h : hits) order.push_back(h.id);
  EXPECT_EQ(order, (std::vector<int64_t>{2, 1, 4, 9, 6}));  // 4, 3, 3, 3, 1
  EXPECT_EQ(hits[1].score, 3.0);
  EXPECT_EQ(idx.search(std::vector<float>{1, 1, 0}, 2)[1].id, 1);
}

TEST(CpuVectorIndex, StaysExactThroughAddReplaceRemove) {
  std::mt19937 rng(11);
  constexpr int kDim = 16;
  CpuVectorIndex idx(kDim);
  Vectors vecs;
  for (int step = 0; step < 800; ++step) {
    const int64_t id = std::uniform_int_distribution<int64_t>(1, 60)(rng);
    const int op = std::uniform_int_distribution<int>(0, 3)(rng);
    if (op == 0) {
      EXPECT_EQ(idx.remove(id), vecs.erase(id) == 1);
    } else {
      const std::vector<float> v = random_unit(rng, kDim);
      if (op == 1 && !vecs.count(id)) {
        idx.add(std::vector<int64_t>{id}, v);
      } else if (op == 2 && vecs.count(id)) {
        idx.replace(std::vector<int64_t>{id}, v);
      } else {
        idx.upsert(std::vector<int64_t>{id}, v);
      }
      vecs[id] = v;
    }
    ASSERT_EQ(idx.size(), vecs.size());
    if (step % 40 == 0) {
      const auto q = random_unit(rng, kDim);
      expect_top_k(idx.search(q, 8), reference(vecs, q), 8, "step " + std::to_string(step), kTol);
    }
  }
  idx.clear();
  EXPECT_EQ(idx.size(), 0u);
  EXPECT_TRUE(idx.search(random_unit(rng, kDim), 3).empty());
}

TEST(CpuVectorIndex, SearchBatchEqualsOneByOne) {
  std::mt19937 rng(3);
  CpuVectorIndex idx(8);
  for (int64_t id = 1; id <= 50; ++id) idx.add(std::vector<int64_t>{id}, random_unit(rng, 8));
  std::vector<float> queries;
  for (int q = 0; q < 4; ++q) {
    const auto v = random_unit(rng, 8);
    queries.insert(queries.end(), v.begin(), v.end());
  }
  const auto batch = idx.search_batch(queries, 6);
  ASSERT_EQ(batch.size(), 4u);
  for (size_t q = 0; q < 4; ++q) EXPECT_EQ(batch[q], idx.search(std::span<const float>(queries).subspan(q * 8, 8), 6));
}

TEST(CpuVectorIndex, BadInput) {
  expect_error([] { CpuVectorIndex idx(0); }, ErrorKind::kInvalidInput, "dim must be positive");
  CpuVectorIndex idx(2);
  idx.add(std::vector<int64_t>{1}, std::vector<float>{1, 0});
  expect_error([&] { idx.add(std::vector<int64_t>{1}, std::vector<float>{0, 1}); }, ErrorKind::kInvalidInput, "already holds id 1");
  expect_error([&] { idx.add(std::vector<int64_t>{2, 2}, std::vector<float>{0, 1, 1, 0}); }, ErrorKind::kInvalidInput,
               "already holds id 2");
  expect_error([&] { idx.replace(std::vector<int64_t>{3}, std::vector<float>{0, 1}); }, ErrorKind::kNotFound, "no id 3");
  expect_error([&] { idx.add(std::vector<int64_t>{4}, std::vector<float>{0, 1, 2}); }, ErrorKind::kInvalidInput, "need 2 floats");
  expect_error([&] { idx.add(std::vector<int64_t>{5}, std::vector<float>{NAN, 1}); }, ErrorKind::kInvalidInput, "non-finite");
  expect_error([&] { idx.search(std::vector<float>{1, 0, 0}, 1); }, ErrorKind::kInvalidInput, "dim 3");
  EXPECT_EQ(idx.size(), 1u);  // failed calls changed nothing
  EXPECT_FALSE(idx.contains(2));
}

TEST(Pooling, LastTokenAndMeanOverRaggedBatches) {
  // Hidden state of row r, dim j: r * 10 + j. Sequences of lengths 3, 1, 2.
  constexpr int kDim = 4;
  const std::vector<int64_t> lengths = {3, 1, 2};
  std::vector<float> hidden(6 * kDim);
  for (size_t r = 0; r < 6; ++r)
    for (size_t j = 0; j < kDim; ++j) hidden[r * kDim + j] = static_cast<float>(r * 10 + j);
  const auto last = pool_hidden_states(hidden, lengths, kDim, Pooling::kLastToken);
  EXPECT_EQ(last, (std::vector<float>{20, 21, 22, 23, /**/ 30, 31, 32, 33, /**/ 50, 51, 52, 53}));
  const auto mean = pool_hidden_states(hidden, lengths, kDim, Pooling::kMean);
  EXPECT_EQ(mean, (std::vector<float>{10, 11, 12, 13, /**/ 30, 31, 32, 33, /**/ 45, 46, 47, 48}));

  expect_error([&] { pool_hidden_states(hidden, std::vector<int64_t>{3, 0, 3}, kDim, Pooling::kMean); },
               ErrorKind::kInvalidInput, "empty sequence");
  expect_error([&] { pool_hidden_states(hidden, std::vector<int64_t>{3, 1}, kDim, Pooling::kMean); },
               ErrorKind::kInvalidInput, "expected 4 tokens");
}

TEST(Pooling, L2NormalizeRows) {
  std::vector<float> v = {3, 4, /**/ 0, 0, /**/ -1e-20f, 1e-20f};
  l2_normalize_rows(v, 2);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  EXPECT_EQ(v[2], 0.f);  // a zero row stays zero, not NaN
  EXPECT_EQ(v[3], 0.f);
  EXPECT_NEAR(v[4], -std::sqrt(0.5f), 1e-6);  // tiny values normalize without underflow
  expect_error([&] { l2_normalize_rows(v, 4); }, ErrorKind::kInvalidInput, "whole number of rows");
}

TEST(HiddenStateEmbedder, TokenizesBatchesPoolsAndNormalizes) {
  constexpr int kDim = 5;
  // Token ids are the bytes; the "model" makes hidden[t][j] = sin(id * (j + 1) + position).
  auto tokenize = [](std::string_view s) { return std::vector<int32_t>(s.begin(), s.end()); };
  std::vector<size_t> batch_sizes;
  auto model = [&](const std::vector<std::vector<int32_t>>& batch) {
    batch_sizes.push_back(batch.size());
    std::vector<float> h;
    for (const auto& seq : batch)
      for (size_t p = 0; p < seq.size(); ++p)
        for (int j = 0; j < kDim; ++j) h.push_back(std::sin(static_cast<float>(seq[p] * (j + 1)) + static_cast<float>(p)));
    return h;
  };
  const std::vector<std::string> texts = {"alpha", "b", "gamma ray", "delta", "e!"};
  for (Pooling pooling : {Pooling::kLastToken, Pooling::kMean}) {
    batch_sizes.clear();
    HiddenStateEmbedder emb({"test:model", kDim, pooling, true, 2, "Query: "}, tokenize, model);
    const std::vector<float> got = emb.embed(texts);
    EXPECT_EQ(batch_sizes, (std::vector<size_t>{2, 2, 1}));
    ASSERT_EQ(got.size(), texts.size() * kDim);
    for (size_t i = 0; i < texts.size(); ++i) {
      // Expected: the same pooling written out directly, then normalized.
      const auto ids = tokenize(texts[i]);
      std::vector<double> want(kDim, 0.0);
      for (size_t p = 0; p < ids.size(); ++p) {
        if (pooling == Pooling::kLastToken && p + 1 != ids.size()) continue;
        for (int j = 0; j < kDim; ++j) want[j] += std::sin(static_cast<float>(ids[p] * (j + 1)) + static_cast<float>(p));
      }
      double norm = 0;
      for (double x : want) norm += x * x;
      norm = std::sqrt(norm);
      double got_norm = 0;
      for (int j = 0; j < kDim; ++j) {
        EXPECT_NEAR(got[i * kDim + j], want[j] / norm, 1e-6) << texts[i] << " dim " << j;
        got_norm += static_cast<double>(got[i * kDim + j]) * got[i * kDim + j];
      }
      EXPECT_NEAR(got_norm, 1.0, 1e-6);
    }
    // Queries get the prefix.
    const std::string prefixed = "Query: b";
    EXPECT_EQ(emb.embed_query("b"), emb.embed(std::span<const std::string>(&prefixed, 1)));
  }
  HiddenStateEmbedder emb({"t", kDim, Pooling::kMean, true, 4, ""}, tokenize, model);
  const std::vector<std::string> empty_text = {""};
  expect_error([&] { emb.embed(empty_text); }, ErrorKind::kInvalidInput, "has no tokens");
  auto bad_model = [](const std::vector<std::vector<int32_t>>&) { return std::vector<float>(3); };
  HiddenStateEmbedder bad({"t", kDim, Pooling::kMean, true, 4, ""}, tokenize, bad_model);
  expect_error([&] { bad.embed(texts); }, ErrorKind::kInvalidInput, "hidden states hold 3 floats");
}

TEST(VectorRetriever, ClientVectorsMatchBruteForcePerUser) {
  inferscale::testing::TempDir dir;
  auto store = FactStore::open(dir.path());
  std::mt19937 rng(21);
  constexpr int kDim = 12;
  const std::vector<std::string> users = {"alice", "bob"};
  std::map<std::string, Vectors> vecs;
  for (const auto& u : users) {
    std::vector<NewFact> facts(40);
    for (size_t i = 0; i < facts.size(); ++i) {
      facts[i].text = u + " fact " + std::to_string(i);
      if (i % 5 != 4) facts[i].vector = random_unit(rng, kDim);  // some facts have no vector
    }
    const auto ids = store->add_facts("default", u, facts);
    for (size_t i = 0; i < ids.size(); ++i)
      if (!facts[i].vector.empty()) vecs[u][ids[i]] = facts[i].vector;
  }
  auto check = [&](const VectorRetriever& r, const std::string& ctx) {
    for (const auto& u : users) {
      EXPECT_EQ(r.indexed("default", u), vecs[u].size()) << ctx;
      for (int q = 0; q < 4; ++q) {
        const auto query = random_unit(rng, kDim);
        const auto hits = r.search_vector("default", u, query, 7);
        expect_top_k(hits, reference(vecs[u], query), 7, ctx + " " + u, kTol);
      }
    }
  };
  {
    auto client = make_client_vector_retriever(*store);
    EXPECT_EQ(client->name(), "client");
    check(*client, "attached");
    // Updates and deletes: a text change drops the vector until a new one is put.
    const int64_t edited = vecs["alice"].begin()->first;
    store->update("default", "alice", edited, FactUpdate{std::string("new text"), {}});
    vecs["alice"].erase(edited);
    const int64_t gone = vecs["bob"].rbegin()->first;
    store->remove("default", "bob", gone);
    vecs["bob"].erase(gone);
    check(*client, "after update/delete");
    const auto fresh = random_unit(rng, kDim);
    store->put_embeddings("default", "alice", kClientEmbedder, std::vector<EmbeddingRow>{{edited, 0, fresh}});
    vecs["alice"][edited] = fresh;
    check(*client, "after put");
    EXPECT_EQ(client->search_vector("default", "alice", fresh, 1).at(0).id, edited);

    expect_error([&] { client->search("default", "alice", "text query", 3); }, ErrorKind::kUnsupported, "query vector");
    expect_error([&] { client->search_vector("default", "alice", std::vector<float>(kDim + 1, 0.1f), 3); },
                 ErrorKind::kInvalidInput, "dim 13");
    EXPECT_TRUE(client->search_vector("default", "carol", fresh, 3).empty());
  }
  store.reset();
  store = FactStore::open(dir.path());
  check(*make_client_vector_retriever(*store), "after reopen");
}

TEST(VectorRetriever, DenseEmbedderEmbedsMissingFactsAndRanksByCosine) {
  inferscale::testing::TempDir dir;
  auto store = FactStore::open(dir.path());
  auto emb = std::make_shared<HashingEmbedder>(64);
  auto dense = make_dense_retriever(*store, emb);
  EXPECT_EQ(dense->name(), "dense:hash64+speaker+date");
  const std::vector<std::string> texts = {"the cat sat on the mat", "dogs chase cats", "stock markets fell today",
                                          "a recipe for apple pie", "the weather is sunny"};
  std::vector<NewFact> facts;
  for (const auto& t : texts) facts.push_back(NewFact{t, {}, {}, {}, {}});
  const auto ids = store->add_facts("default", "u", facts);
  store->add_facts("default", "other", facts);  // same texts, other user
  EXPECT_TRUE(dense->search("default", "u", "apple pie", 3).empty());  // nothing embedded yet

  EXPECT_EQ(embed_missing(*store, *emb, "default", "u", 2), texts.size());
  EXPECT_EQ(embed_missing(*store, *emb, "default", "u", 2), 0u);
  EXPECT_EQ(dense->indexed("default", "u"), texts.size());
  EXPECT_EQ(dense->indexed("default", "other"), 0u);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto hits = dense->search("default", "u", texts[i], 2);
    ASSERT_FALSE(hits.empty());
    EXPECT_EQ(hits[0].id, ids[i]);
    EXPECT_NEAR(hits[0].score, 1.0, 1e-5);
  }
  // Editing a fact drops its vector; embed_missing re-embeds just that one.
  store->update("default", "u", ids[3], FactUpdate{std::string("market crash news"), {}});
  EXPECT_EQ(dense->indexed("default", "u"), texts.size() - 1);
  EXPECT_EQ(embed_missing(*store, *emb, "default", "u"), 1u);
  EXPECT_EQ(dense->search("default", "u", "market crash news", 1).at(0).id, ids[3]);
  // Another embedder's vectors are not this retriever's.
  store->put_embeddings("default", "u", "other-embedder", std::vector<EmbeddingRow>{{ids[0], 0, {1.f}}});
  EXPECT_EQ(dense->indexed("default", "u"), texts.size());
  expect_error([&] { VectorRetriever r(*store, "mismatch", emb); }, ErrorKind::kInvalidInput, "differs");
}

// Issue 11, defect 7: a fact deleted while its vector was being computed (between the store read
// and the write of the vectors) is skipped; the search that triggered the embedding still
// answers, where it used to fail with "not found" (a 404 for a chat with memory).
TEST(DenseRetriever, AFactDeletedWhileItIsEmbeddedIsSkipped) {
  inferscale::testing::TempDir dir;
  auto store = FactStore::open(dir.path());
  const auto ids = store->add_facts("default", "u", std::vector<NewFact>{{"red bicycle", "", {}, "", {}},
                                                                         {"green kayak", "", {}, "", {}},
                                                                         {"blue bicycle", "", {}, "", {}}});
  auto emb = std::make_shared<HashingEmbedder>(16);
  DenseRetriever dense(*store, emb);
  emb->during_embed = [&] { store->remove("default", "u", ids[2]); };
  const auto hits = dense.search("default", "u", "bicycle", 5);
  ASSERT_FALSE(hits.empty());
  for (const ScoredFact& h : hits) EXPECT_NE(h.id, ids[2]);
  EXPECT_EQ(dense.missing("default", "u"), 0u);
  // The whole user goes while its new fact is embedded.
  store->add_fact("default", "u", NewFact{"yellow bicycle", "", {}, "", {}});
  emb->during_embed = [&] { store->remove_user("default", "u"); };
  EXPECT_TRUE(dense.search("default", "u", "bicycle", 5).empty());
}
