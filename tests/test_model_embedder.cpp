// ModelEmbedder: texts packed into shared forwards pool to the same vectors as an independent
// single-sequence forward of each text (last-token and mean pooling, L2 norm), a text split
// across forwards equals one pass, tokenization (special tokens, EOS, truncation, query prefix),
// concurrent callers, and dense retrieval over it (brute-force cosine top-k, user isolation,
// vectors embedded on open and after writes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "memory/retrieval/dense_retriever.h"
#include "memory/retrieval/model_embedder.h"
#include "model/model.h"
#include "test_fact_store_util.h"
#include "tokenizer/byte_tokenizer.h"

using namespace inferscale;

namespace {

std::shared_ptr<const Model> fixture_model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  auto& m = cache[name];
  if (!m)
    m = std::make_shared<const Model>(name == "demo" ? load_model("demo")
                                                     : load_model(std::string(INFERSCALE_FIXTURES) + "/models/" + name));
  return m;
}

std::unique_ptr<ModelEmbedder> make_embedder(const std::string& model, ModelEmbedderOptions o) {
  auto m = fixture_model(model);
  BackendOptions bo;
  bo.num_cache_blocks = embedder_cache_blocks(o, bo.block_size);
  return std::make_unique<ModelEmbedder>(m, make_cpu_backend(m->config, m->weights, bo), o);
}

// Final-normed hidden states of every token of `tokens` prefilled alone from position 0, by a
// backend of its own: [n, hidden].
std::vector<float> forward_alone(const Model& m, const std::vector<int32_t>& tokens) {
  const auto n = static_cast<int32_t>(tokens.size());
  constexpr int32_t kBs = 16;
  BackendOptions bo;
  bo.block_size = kBs;
  bo.num_cache_blocks = (n + kBs - 1) / kBs;
  auto be = make_cpu_backend(m.config, m.weights, bo);
  ForwardBatch fb;
  fb.output = ForwardBatch::Output::kHidden;
  for (int32_t i = 0; i < n; ++i) {
    fb.token_ids.push_back(tokens[static_cast<size_t>(i)]);
    fb.positions.push_back(i);
    fb.slot_mapping.push_back(i);  // block b is id b: slot == position
    fb.output_tokens.push_back(i);
  }
  fb.q_indptr = {0, n};
  for (int32_t b = 0; b < bo.num_cache_blocks; ++b) fb.kv_indices.push_back(b);
  fb.kv_indptr = {0, static_cast<int32_t>(fb.kv_indices.size())};
  std::vector<float> out;
  be->forward(fb, out);
  return out;
}

// The reference vector: pooling and normalization written out here, in double.
std::vector<float> reference_vector(const Model& m, const std::vector<int32_t>& tokens, Pooling pooling, bool normalize) {
  const std::vector<float> h = forward_alone(m, tokens);
  const auto H = static_cast<size_t>(m.config.hidden_size), n = tokens.size();
  std::vector<double> v(H, 0.0);
  for (size_t j = 0; j < H; ++j) {
    if (pooling == Pooling::kLastToken) {
      v[j] = h[(n - 1) * H + j];
    } else {
      for (size_t t = 0; t < n; ++t) v[j] += h[t * H + j];
      v[j] /= static_cast<double>(n);
    }
  }
  double norm = 0;
  for (double x : v) norm += x * x;
  norm = std::sqrt(norm);
  std::vector<float> out(H);
  for (size_t j = 0; j < H; ++j) out[j] = static_cast<float>(normalize ? v[j] / norm : v[j]);
  return out;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

double norm_of(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

const std::vector<std::string> kTexts = {
    "Alice adopted a cat named Miso.",
    "x",
    "",
    "Bob ran the Berlin marathon in 2023 and finished in under four hours, which he trained for all spring.",
    "The weather in Oslo is cold in January.",
    "Caroline moved from Sweden four years ago; she still misses her grandmother's cinnamon buns every winter.",
    "tea",
};

}  // namespace

TEST(ModelEmbedder, TokenizeAddsSpecialTokensEosAndTruncates) {
  ModelEmbedderOptions o;
  o.max_tokens = 20;
  o.eos_id = default_embedder_eos(ByteTokenizer(), Pooling::kLastToken);
  EXPECT_EQ(o.eos_id, ByteTokenizer::kEos);
  EXPECT_EQ(default_embedder_eos(ByteTokenizer(), Pooling::kMean), std::nullopt);
  auto emb = make_embedder("demo", o);
  // [BOS][bytes][EOS]; user text never becomes a special token.
  EXPECT_EQ(emb->tokenize("hi"), (std::vector<int32_t>{ByteTokenizer::kBos, 'h', 'i', ByteTokenizer::kEos}));
  EXPECT_EQ(emb->tokenize("<|end_of_text|>").size(), 17u);
  // Truncated to 20 tokens, special tokens kept: BOS + 18 bytes + EOS.
  const auto t = emb->tokenize(std::string(100, 'a'));
  ASSERT_EQ(t.size(), 20u);
  EXPECT_EQ(t.front(), ByteTokenizer::kBos);
  EXPECT_EQ(t[18], 'a');
  EXPECT_EQ(t.back(), ByteTokenizer::kEos);
  o.eos_id.reset();
  EXPECT_EQ(make_embedder("demo", o)->tokenize("hi"), (std::vector<int32_t>{ByteTokenizer::kBos, 'h', 'i'}));
  o.max_tokens = 2;
  o.eos_id = ByteTokenizer::kEos;
  inferscale::testing::expect_error([&] { make_embedder("demo", o); }, ErrorKind::kInvalidInput, "no room");
}

TEST(ModelEmbedder, BatchedEqualsAloneForLastAndMeanPooling) {
  for (const char* model : {"qwen3_qknorm", "qwen2_bias_tied", "demo"}) {
    for (Pooling pooling : {Pooling::kLastToken, Pooling::kMean}) {
      ModelEmbedderOptions o;
      o.pooling = pooling;
      o.eos_id = default_embedder_eos(*fixture_model(model)->tokenizer, pooling);
      o.max_batch_tokens = 64;  // several texts per forward, the long ones split across forwards
      auto emb = make_embedder(model, o);
      const std::vector<float> got = emb->embed(kTexts);
      const auto H = static_cast<size_t>(emb->dim());
      ASSERT_EQ(got.size(), kTexts.size() * H);
      for (size_t i = 0; i < kTexts.size(); ++i) {
        const std::span<const float> row(got.data() + i * H, H);
        const auto ref = reference_vector(*fixture_model(model), emb->tokenize(kTexts[i]), pooling, true);
        EXPECT_LT(max_abs_diff(row, ref), 1e-5) << model << " pooling " << int(pooling) << " text " << i;
        EXPECT_NEAR(norm_of(row), 1.0, 1e-5);
      }
      EXPECT_GT(emb->tokens_processed(), 64);  // more than one forward
    }
  }
}

TEST(ModelEmbedder, MeanAndLastPoolingDifferAndRawVectorsNormalizeToTheSame) {
  ModelEmbedderOptions o;
  auto last = make_embedder("qwen3_qknorm", o);
  o.pooling = Pooling::kMean;
  auto mean = make_embedder("qwen3_qknorm", o);
  o.normalize = false;
  auto raw = make_embedder("qwen3_qknorm", o);
  EXPECT_NE(last->name(), mean->name());
  EXPECT_NE(mean->name(), raw->name());
  EXPECT_NE(last->name().find(":last:l2:"), std::string::npos) << last->name();
  EXPECT_NE(raw->name().find(":mean:raw:"), std::string::npos) << raw->name();
  const std::vector<std::string> one = {kTexts[0]};
  const auto a = last->embed(one), b = mean->embed(one), r = raw->embed(one);
  EXPECT_GT(max_abs_diff(a, b), 1e-2);
  const double n = norm_of(r);
  EXPECT_GT(std::fabs(n - 1.0), 1e-3);
  std::vector<float> scaled(r);
  for (float& x : scaled) x = static_cast<float>(x / n);
  EXPECT_LT(max_abs_diff(scaled, b), 1e-6);
  EXPECT_LT(max_abs_diff(r, reference_vector(*fixture_model("qwen3_qknorm"), raw->tokenize(kTexts[0]), Pooling::kMean, false)), 1e-5);
}

TEST(ModelEmbedder, LongTextChunkedAcrossForwardsEqualsOnePass) {
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "sentence " + std::to_string(i) + " of a long memory. ";
  const std::vector<std::string> texts = {kTexts[0], long_text, kTexts[4]};
  for (Pooling pooling : {Pooling::kLastToken, Pooling::kMean}) {
    ModelEmbedderOptions o;
    o.pooling = pooling;
    o.max_tokens = 1024;
    o.max_batch_tokens = 2048;
    auto one_pass = make_embedder("qwen3_qknorm", o);
    o.max_batch_tokens = 7;  // the long text goes through in ~120 chunks
    auto chunked = make_embedder("qwen3_qknorm", o);
    ASSERT_GT(one_pass->tokenize(long_text).size(), 700u);
    EXPECT_LT(max_abs_diff(one_pass->embed(texts), chunked->embed(texts)), 1e-5);
  }
}

TEST(ModelEmbedder, QueryPrefixAndConcurrentCallers) {
  ModelEmbedderOptions o;
  o.query_prefix = "Instruct: find the fact\nQuery: ";
  auto emb = make_embedder("demo", o);
  const std::vector<std::string> prefixed = {o.query_prefix + "cat name"};
  EXPECT_EQ(emb->embed_query("cat name"), emb->embed(prefixed));
  EXPECT_GT(max_abs_diff(emb->embed_query("cat name"), emb->embed(std::vector<std::string>{"cat name"})), 1e-3);

  // The engine thread and HTTP threads embed at once: the backend is serialized, results unchanged.
  const std::vector<float> want = emb->embed(kTexts);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = emb->embed(kTexts); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

TEST(DenseRetriever, ModelEmbedderTopKIsBruteForceCosineAndUsersAreIsolated) {
  inferscale::testing::TempDir dir;
  auto store = FactStore::open(dir.path());
  std::vector<NewFact> facts;
  for (const auto& t : kTexts)
    if (!t.empty()) facts.push_back(NewFact{t, {}, {}, {}, {}});
  const auto alice = store->add_facts("default", "alice", facts);
  const auto bob = store->add_facts("default", "bob", std::span<const NewFact>(facts.data(), 3));
  const auto acme = store->add_facts("acme", "alice", std::span<const NewFact>(facts.data() + 2, 2));  // same name, other tenant

  ModelEmbedderOptions o;
  o.max_batch_tokens = 96;
  std::shared_ptr<ModelEmbedder> emb = make_embedder("demo", o);
  auto dense = std::make_unique<DenseRetriever>(*store, emb, 4);
  EXPECT_EQ(dense->name(), "dense:" + vector_space(*emb));
  EXPECT_EQ(dense->missing("default", "alice"), alice.size());
  EXPECT_EQ(dense->refresh_all(), alice.size() + bob.size() + 2);  // "on open": every user
  EXPECT_EQ(dense->missing("default", "alice"), 0u);
  EXPECT_EQ(dense->refresh_all(), 0u);

  auto brute_force = [&](const std::string& tenant, const std::string& user, const std::string& query) {
    const EmbeddingMatrix m = store->embeddings(tenant, user, vector_space(*emb));
    const std::vector<float> q = emb->embed_query(query);
    std::vector<ScoredFact> all;
    for (size_t i = 0; i < m.ids.size(); ++i) {
      double dot = 0;
      for (size_t j = 0; j < q.size(); ++j) dot += double(q[j]) * m.data[i * static_cast<size_t>(m.dim) + j];
      all.push_back({m.ids[i], dot});  // unit vectors: inner product == cosine
    }
    std::sort(all.begin(), all.end(), ranks_before);
    return all;
  };
  for (const std::string query : {"cat", "marathon in Berlin", "winter buns", "Oslo"}) {
    for (size_t k : {1u, 3u, 10u}) {
      const auto ref = brute_force("default", "alice", query);
      ASSERT_EQ(ref.size(), alice.size());
      inferscale::testing::expect_top_k(dense->search("default", "alice", query, k), ref, k, "alice " + query, 1e-5);
      const auto b = dense->search("default", "bob", query, k);
      EXPECT_EQ(b.size(), std::min<size_t>(k, bob.size()));
      for (const auto& h : b) EXPECT_NE(std::find(bob.begin(), bob.end(), h.id), bob.end()) << "bob got id " << h.id;
      // Ids are per tenant: acme's alice has ids 1 and 2 of her own, and only those.
      for (const auto& h : dense->search("acme", "alice", query, k))
        EXPECT_NE(std::find(acme.begin(), acme.end(), h.id), acme.end()) << "acme/alice got id " << h.id;
      EXPECT_EQ(dense->search("acme", "alice", query, 10).size(), std::min<size_t>(10, acme.size()));
    }
  }
  EXPECT_TRUE(dense->search("default", "nobody", "cat", 5).empty());

  // After a write: refresh() embeds the new fact at once; a search alone would embed it too.
  const int64_t added = store->add_fact("default", "bob", NewFact{"Bob keeps bees on his roof", {}, {}, {}, {}});
  EXPECT_EQ(dense->missing("default", "bob"), 1u);
  dense->refresh("default", "bob");
  EXPECT_EQ(dense->missing("default", "bob"), 0u);
  EXPECT_EQ(dense->search("default", "bob", "Bob keeps bees on his roof", 1).at(0).id, added);
  store->update("default", "bob", bob[0], FactUpdate{std::string("Bob sold his bicycle"), {}});
  EXPECT_EQ(dense->missing("default", "bob"), 1u);
  const auto hits = dense->search("default", "bob", "Bob sold his bicycle", 10);  // embeds the edit first
  EXPECT_EQ(hits.size(), bob.size() + 1);
  EXPECT_EQ(dense->missing("default", "bob"), 0u);
  EXPECT_EQ(hits.at(0).id, bob[0]);  // the query is the fact's own text: cosine 1, the maximum
  EXPECT_NEAR(hits.at(0).score, 1.0, 1e-5);

  // Reopened: the stored vectors are indexed again, nothing is embedded twice.
  dense.reset();
  store.reset();
  store = FactStore::open(dir.path());
  dense = std::make_unique<DenseRetriever>(*store, emb, 4);
  const int64_t before = emb->tokens_processed();
  EXPECT_EQ(dense->refresh_all(), 0u);
  EXPECT_EQ(emb->tokens_processed(), before);
  EXPECT_EQ(dense->vectors().indexed("default", "alice"), alice.size());
}
