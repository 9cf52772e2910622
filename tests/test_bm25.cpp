// BM25: tokenizer, a hand-computed score, and top-k equal to a brute-force reference computed
// straight from the formulas on random corpora (ties included), through puts, replaces and
// removes, and through the store-backed retriever for several users.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "memory/retrieval/bm25_index.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/store/fact_store.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::expect_top_k;

namespace {

// Every document with a positive score, in ranking order, computed without the index.
std::vector<ScoredFact> reference(const std::map<int64_t, std::string>& docs, const std::string& query,
                                  Bm25Params p = {}) {
  std::map<int64_t, std::vector<std::string>> toks;
  double total = 0;
  for (const auto& [id, text] : docs) {
    toks[id] = bm25_terms(text);
    total += static_cast<double>(toks[id].size());
  }
  const double n = static_cast<double>(docs.size());
  const double avgdl = n > 0 ? total / n : 0;
  std::vector<ScoredFact> out;
  for (const auto& [id, dt] : toks) {
    double score = 0;
    bool matched = false;
    for (const std::string& t : bm25_terms(query)) {
      double df = 0;
      for (const auto& [_, other] : toks) df += std::count(other.begin(), other.end(), t) > 0 ? 1 : 0;
      const double tf = static_cast<double>(std::count(dt.begin(), dt.end(), t));
      if (tf == 0) continue;
      matched = true;
      const double idf = std::log(1.0 + (n - df + 0.5) / (df + 0.5));
      const double dl = static_cast<double>(dt.size());
      score += idf * tf * (p.k1 + 1.0) / (tf + p.k1 * (1.0 - p.b + p.b * dl / avgdl));
    }
    if (matched) out.push_back(ScoredFact{id, score});
  }
  std::sort(out.begin(), out.end(), ranks_before);
  return out;
}

struct Corpus {
  std::mt19937 rng;
  std::vector<std::string> vocab;
  explicit Corpus(uint32_t seed, int vocab_size = 30) : rng(seed) {
    for (int i = 0; i < vocab_size; ++i) vocab.push_back("w" + std::to_string(i));
    vocab.push_back("Caf\xc3\xa9");  // a UTF-8 word
  }
  // Skewed word choice so some terms are in most documents and some in few.
  std::string word() {
    std::uniform_real_distribution<double> u(0, 1);
    return vocab[static_cast<size_t>(std::pow(u(rng), 2.0) * static_cast<double>(vocab.size()))];
  }
  std::string text(int max_words) {
    std::string s;
    const int n = std::uniform_int_distribution<int>(0, max_words)(rng);
    for (int i = 0; i < n; ++i) s += (i ? (i % 4 == 0 ? ", " : " ") : "") + word();
    return s.empty() ? "..." : s;  // a document with no tokens at all still counts in N
  }
  std::string query() {
    std::string q = text(5);
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) q += " unknownword";
    return q;
  }
};

}  // namespace

TEST(Bm25Tokenize, LowercasesAsciiSplitsOnPunctuationKeepsUtf8) {
  EXPECT_EQ(bm25_tokenize("Hello, World! It's 2023..."), (std::vector<std::string>{"hello", "world", "it", "s", "2023"}));
  EXPECT_EQ(bm25_tokenize("  --  "), std::vector<std::string>{});
  EXPECT_EQ(bm25_tokenize("Caf\xc3\xa9 na\xc3\xafve"), (std::vector<std::string>{"caf\xc3\xa9", "na\xc3\xafve"}));
  EXPECT_EQ(bm25_tokenize("\xc3\x89""COLE"), (std::vector<std::string>{"\xc3\x89""cole"}));  // non-ASCII not folded
  EXPECT_EQ(bm25_tokenize("\xe6\x9d\xb1\xe4\xba\xac-tower"), (std::vector<std::string>{"\xe6\x9d\xb1\xe4\xba\xac", "tower"}));
  EXPECT_EQ(bm25_tokenize("snake_case\tTAB"), (std::vector<std::string>{"snake", "case", "tab"}));
}

TEST(Bm25Terms, DropStopWordsAndStemEnglishWords) {
  EXPECT_EQ(bm25_terms("What pet did I adopt, and what is its name?"), (std::vector<std::string>{"pet", "adopt", "name"}));
  EXPECT_EQ(bm25_terms("Alice adopted a cat named Miso"), (std::vector<std::string>{"alic", "adopt", "cat", "name", "miso"}));
  EXPECT_EQ(bm25_terms("running runs 2023 Caf\xc3\xa9s"), (std::vector<std::string>{"run", "run", "2023", "caf\xc3\xa9s"}));
  EXPECT_EQ(bm25_terms("Is it what you were?"), std::vector<std::string>{});
  EXPECT_TRUE(is_stop_word("my"));
  EXPECT_FALSE(is_stop_word("cat"));
  EXPECT_EQ(stem_word("adopting"), "adopt");
  EXPECT_EQ(stem_word("x9"), "x9");  // not plain letters: kept whole
}

TEST(Bm25Index, FindsAnInflectedWordOfTheQuestion) {
  Bm25Index idx;
  idx.put(1, "Alice adopted a cat named Miso");
  idx.put(2, "My sister lives in Lisbon");
  const auto hits = idx.search("What pet did I adopt?", 5);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].id, 1);
  EXPECT_TRUE(idx.search("What is it?", 5).empty());  // only stop words: no terms
}

TEST(Bm25Index, HandComputedScore) {
  Bm25Index idx;
  idx.put(1, "x y");
  idx.put(2, "x z z");
  // N = 2, df(z) = 1, idf = ln(1 + 1.5 / 1.5) = ln 2; d2: tf 2, |d| 3, avgdl 2.5.
  const double want = std::log(2.0) * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 3 / 2.5));
  const auto hits = idx.search("Z", 10);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].id, 2);
  EXPECT_NEAR(hits[0].score, want, 1e-12);
  // Repeated query tokens count again (rank_bm25's sum over the query).
  EXPECT_NEAR(idx.search("z z", 10)[0].score, 2 * want, 1e-12);
}

TEST(Bm25Index, TiesBreakByAscendingId) {
  Bm25Index idx;
  for (int64_t id : {10, 3, 7}) idx.put(id, "apple pie");
  idx.put(5, "banana split");
  idx.put(1, "an apple in a much longer document than the others");
  const auto hits = idx.search("apple", 10);
  ASSERT_EQ(hits.size(), 4u);
  EXPECT_EQ(hits[0].score, hits[1].score);
  EXPECT_EQ(hits[1].score, hits[2].score);
  EXPECT_EQ((std::vector<int64_t>{hits[0].id, hits[1].id, hits[2].id}), (std::vector<int64_t>{3, 7, 10}));
  EXPECT_EQ(hits[3].id, 1);  // same tf, longer document: lower
  EXPECT_EQ(idx.search("apple", 2).size(), 2u);
  EXPECT_EQ(idx.search("apple", 2)[1].id, 7);
}

TEST(Bm25Index, EmptyQueriesAndIndexes) {
  Bm25Index idx;
  EXPECT_TRUE(idx.search("anything", 5).empty());
  idx.put(1, "some text");
  EXPECT_TRUE(idx.search("", 5).empty());
  EXPECT_TRUE(idx.search("?!", 5).empty());
  EXPECT_TRUE(idx.search("unrelated", 5).empty());
  EXPECT_TRUE(idx.search("text", 0).empty());
  EXPECT_FALSE(idx.remove(2));
  EXPECT_TRUE(idx.remove(1));
  EXPECT_EQ(idx.size(), 0u);
  EXPECT_EQ(idx.num_terms(), 0u);
}

TEST(Bm25Index, MatchesBruteForceOnRandomCorpora) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Corpus c(seed);
    Bm25Index idx;
    std::map<int64_t, std::string> docs;
    const int n = std::uniform_int_distribution<int>(1, 120)(c.rng);
    for (int i = 0; i < n; ++i) {
      const int64_t id = std::uniform_int_distribution<int64_t>(1, 400)(c.rng);  // some ids repeat: replace
      docs[id] = c.text(16);
      idx.put(id, docs[id]);
    }
    ASSERT_EQ(idx.size(), docs.size());
    for (int q = 0; q < 15; ++q) {
      const std::string query = c.query();
      for (size_t k : {1, 3, 10, 1000}) {
        expect_top_k(idx.search(query, k), reference(docs, query), k,
                     "seed " + std::to_string(seed) + " query '" + query + "' k " + std::to_string(k));
      }
    }
  }
}

TEST(Bm25Index, StaysExactThroughPutsReplacesAndRemoves) {
  Corpus c(99);
  Bm25Index idx(Bm25Params{1.5, 0.6});
  std::map<int64_t, std::string> docs;
  for (int step = 0; step < 600; ++step) {
    const int op = std::uniform_int_distribution<int>(0, 9)(c.rng);
    const int64_t id = std::uniform_int_distribution<int64_t>(1, 80)(c.rng);
    if (op < 3) {
      EXPECT_EQ(idx.remove(id), docs.erase(id) == 1);
    } else {
      docs[id] = c.text(12);
      idx.put(id, docs[id]);
    }
    if (step % 20 == 0) {
      const std::string query = c.query();
      expect_top_k(idx.search(query, 7), reference(docs, query, Bm25Params{1.5, 0.6}), 7,
                   "step " + std::to_string(step) + " query '" + query + "'");
    }
  }
}

TEST(Bm25Retriever, FollowsTheStoreAndKeepsUsersApart) {
  inferscale::testing::TempDir dir;
  auto store = FactStore::open(dir.path());
  Corpus c(7);
  const std::vector<UserRef> users = {{"default", "alice"}, {"default", "bob"}, {"acme", "alice"}};
  std::map<size_t, std::map<int64_t, std::string>> docs;  // by user index
  // Some facts exist before the retriever: it must index them at attach.
  for (size_t u = 0; u < users.size(); ++u)
    for (int i = 0; i < 10; ++i) {
      const std::string t = c.text(10);
      docs[u][store->add_fact(users[u].tenant, users[u].user, NewFact{t, {}, {}, {}, {}})] = t;
    }
  auto check = [&](const Retriever& r, const std::string& ctx) {
    for (size_t u = 0; u < users.size(); ++u) {
      for (int q = 0; q < 5; ++q) {
        const std::string query = c.query();
        const auto hits = r.search(users[u].tenant, users[u].user, query, 5);
        expect_top_k(hits, reference(docs[u], query), 5, ctx + " user " + std::to_string(u) + " '" + query + "'");
        for (const auto& h : hits) EXPECT_TRUE(docs[u].count(h.id)) << "foreign fact " << h.id;
      }
    }
  };
  {
    Bm25Retriever bm25(*store);
    check(bm25, "after attach");
    for (int step = 0; step < 150; ++step) {
      const size_t u = std::uniform_int_distribution<size_t>(0, users.size() - 1)(c.rng);
      const int op = std::uniform_int_distribution<int>(0, 5)(c.rng);
      auto& mine = docs[u];
      if (op <= 2 || mine.empty()) {
        std::vector<NewFact> batch(std::uniform_int_distribution<size_t>(1, 3)(c.rng));
        for (auto& f : batch) f.text = c.text(10);
        const auto ids = store->add_facts(users[u].tenant, users[u].user, batch);
        for (size_t i = 0; i < ids.size(); ++i) mine[ids[i]] = batch[i].text;
      } else {
        auto it = mine.begin();
        std::advance(it, std::uniform_int_distribution<size_t>(0, mine.size() - 1)(c.rng));
        if (op == 3) {
          store->remove(users[u].tenant, users[u].user, it->first);
          mine.erase(it);
        } else if (op == 4) {
          it->second = c.text(10);
          store->update(users[u].tenant, users[u].user, it->first, FactUpdate{it->second, {}});
        } else {
          store->update(users[u].tenant, users[u].user, it->first, FactUpdate{{}, std::string("{\"m\":1}")});
        }
      }
      if (step % 25 == 0) check(bm25, "step " + std::to_string(step));
    }
    check(bm25, "after edits");
    for (size_t u = 0; u < users.size(); ++u) EXPECT_EQ(bm25.indexed(users[u].tenant, users[u].user), docs[u].size());
    store->remove_user("default", "bob");
    docs[1].clear();
    EXPECT_TRUE(bm25.search("default", "bob", "w0 w1 w2 w3", 10).empty());
    EXPECT_TRUE(bm25.search("default", "nobody", "w0", 10).empty());
    check(bm25, "after delete-all");
  }
  // Reopened: the index rebuilt from disk ranks exactly the same.
  store.reset();
  store = FactStore::open(dir.path());
  Bm25Retriever again(*store);
  check(again, "after reopen");
}
