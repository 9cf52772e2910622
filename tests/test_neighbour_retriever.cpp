// Neighbour expansion (memory/retrieval/neighbour_retriever.h) over BM25 and a real store: a
// retrieved turn brings the turns beside it in its session, never across sessions, users or
// deleted turns; free-standing facts keep their ranking; weight 0 is BM25's ranking; a search's
// own weight overrides the default. And BM25's document: the speaker and the date are indexed.
#include <gtest/gtest.h>

#include <algorithm>

#include "memory/retrieval/bm25_retriever.h"
#include "memory/retrieval/neighbour_retriever.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::TempDir;

namespace {

NewFact turn(std::string text, std::string session, std::string speaker = "Ann") {
  NewFact f;
  f.text = std::move(text);
  f.source.session = std::move(session);
  f.source.speaker = std::move(speaker);
  return f;
}

std::vector<int64_t> ids_of(const std::vector<ScoredFact>& hits) {
  std::vector<int64_t> out;
  for (const ScoredFact& h : hits) out.push_back(h.id);
  return out;
}

bool has(const std::vector<ScoredFact>& hits, int64_t id) {
  return std::any_of(hits.begin(), hits.end(), [id](const ScoredFact& h) { return h.id == id; });
}

// One conversation of two sessions: only turn 1 (session 1) and turn 4 (session 2) say "kayak".
struct Turns {
  TempDir dir;
  std::unique_ptr<FactStore> store = FactStore::open(dir.path());
  std::vector<int64_t> ids = store->add_turns(
      kDefaultTenant, "u", "c",
      std::vector<NewFact>{turn("we talked about the weather", "s1"), turn("did you buy the kayak", "s1"),
                           turn("yes last tuesday at the harbour", "s1"), turn("session two starts here", "s2"),
                           turn("the kayak leaks a little", "s2"), turn("maybe patch it", "s2")});
};

}  // namespace

TEST(NeighbourRetriever, ARetrievedTurnBringsTheTurnsBesideItInItsSession) {
  Turns t;
  NeighbourRetriever r(*t.store, std::make_unique<Bm25Retriever>(*t.store), 0.5);
  const auto hits = r.search(kDefaultTenant, "u", "kayak", 6);
  // The two matches first, then their neighbours (each lent half a match's score).
  ASSERT_GE(hits.size(), 4u);
  EXPECT_TRUE(has(std::vector(hits.begin(), hits.begin() + 2), t.ids[1]));
  EXPECT_TRUE(has(std::vector(hits.begin(), hits.begin() + 2), t.ids[4]));
  for (const int64_t n : {t.ids[0], t.ids[2], t.ids[3], t.ids[5]}) EXPECT_TRUE(has(hits, n)) << n;
  // The answer to "did you buy it" (turn 2) is found although it shares no word with the question.
  EXPECT_EQ(ids_of(r.search(kDefaultTenant, "u", "did you buy it", 3)), (std::vector<int64_t>{t.ids[1], t.ids[0], t.ids[2]}));
  // BM25 alone finds only the turns that share words.
  const auto plain = Bm25Retriever(*t.store).search(kDefaultTenant, "u", "kayak", 6);
  EXPECT_EQ(plain.size(), 2u);
}

TEST(NeighbourRetriever, NeverAcrossSessionsUsersOrDeletedTurns) {
  Turns t;
  // Another user with the same words: never returned.
  t.store->add_turns(kDefaultTenant, "v", "c", std::vector<NewFact>{turn("kayak", "s1"), turn("paddle", "s1")});
  NeighbourRetriever r(*t.store, std::make_unique<Bm25Retriever>(*t.store), 1.0);
  auto hits = r.search(kDefaultTenant, "u", "harbour", 10);  // turn 2 (s1), the last turn of its session
  EXPECT_TRUE(has(hits, t.ids[2]));
  EXPECT_TRUE(has(hits, t.ids[1]));
  EXPECT_FALSE(has(hits, t.ids[3])) << "turn 3 opens session 2: not a neighbour of turn 2";
  const auto others = r.search(kDefaultTenant, "u", "kayak paddle", 10);
  for (const Fact& f : t.store->list(kDefaultTenant, "v")) EXPECT_FALSE(has(others, f.id)) << "another user's turn";
  // A deleted neighbour is gone from the index.
  t.store->remove(kDefaultTenant, "u", t.ids[1]);
  hits = r.search(kDefaultTenant, "u", "harbour", 10);
  EXPECT_FALSE(has(hits, t.ids[1]));
  EXPECT_EQ(ids_of(hits), std::vector<int64_t>{t.ids[2]});
}

TEST(NeighbourRetriever, WeightZeroIsTheBaseRankingAndASearchMayChooseItsWeight) {
  Turns t;
  // Free-standing facts have no neighbours.
  const int64_t loose = t.store->add_fact(kDefaultTenant, "u", NewFact{"a kayak rack for the car", {}, {}, {}, {}});
  const Bm25Retriever bm25(*t.store);
  NeighbourRetriever off(*t.store, std::make_unique<Bm25Retriever>(*t.store), 0.0);
  NeighbourRetriever on(*t.store, std::make_unique<Bm25Retriever>(*t.store), 0.5);
  const auto base = bm25.search(kDefaultTenant, "u", "kayak", 10);
  EXPECT_EQ(off.search(kDefaultTenant, "u", "kayak", 10), base);
  SearchOptions zero;
  zero.neighbours = 0.0;
  EXPECT_EQ(on.search_with(kDefaultTenant, "u", "kayak", 10, zero), base);
  SearchOptions half;
  half.neighbours = 0.5;
  EXPECT_EQ(off.search_with(kDefaultTenant, "u", "kayak", 10, half), on.search(kDefaultTenant, "u", "kayak", 10));
  EXPECT_TRUE(has(on.search(kDefaultTenant, "u", "kayak", 10), loose));
  EXPECT_THROW(NeighbourRetriever(*t.store, std::make_unique<Bm25Retriever>(*t.store), 1.5), Error);
}

TEST(Bm25Document, TheSpeakerAndTheDateAreIndexed) {
  TempDir dir;
  auto store = FactStore::open(dir.path());
  NewFact a = turn("I went to the support group", "s1", "Caroline");
  NewFact b = turn("I went to the support group", "s1", "Melanie");
  b.timestamp = "8 May, 2023";
  const auto ids = store->add_turns(kDefaultTenant, "u", "c", std::vector<NewFact>{a, b});
  const Bm25Retriever bm25(*store);
  EXPECT_EQ(bm25.search(kDefaultTenant, "u", "When did Caroline go to the support group?", 1)[0].id, ids[0]);
  EXPECT_EQ(bm25.search(kDefaultTenant, "u", "Who went to the support group in May?", 1)[0].id, ids[1]);
  Fact f;
  f.text = "text";
  f.source.speaker = "Ann";
  f.timestamp = "1 June 2024";
  EXPECT_EQ(bm25_document(f), "Ann text 1 June 2024");
}
