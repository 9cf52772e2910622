// FactStore: CRUD, pagination, encoding windows, isolation, versions, deletes, restart,
// settings, embeddings, bad input, schema and concurrency. The contract (FactStoreContract) runs
// on SQLite and on PostgreSQL; what only a data directory has (files, SQLite's schema history)
// is tested on SQLite alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "memory/retrieval/bm25_retriever.h"
#include "memory/store/fact_store.h"
#include "memory/store/schema.h"
#include "memory/store/sqlite.h"
#include "store_backends.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::expect_error;
using inferscale::testing::TempDir;

// The store's contract, on both engines (store_backends.h).
class FactStoreContract : public inferscale::testing::StoreTest {};
INSTANTIATE_STORE_TESTS(FactStoreContract);

namespace {

NewFact fact(std::string text, std::string speaker = "", std::string date = "") {
  NewFact f;
  f.text = std::move(text);
  f.source.speaker = std::move(speaker);
  f.timestamp = std::move(date);
  return f;
}

std::vector<NewFact> numbered(const std::string& prefix, int n) {
  std::vector<NewFact> out;
  for (int i = 0; i < n; ++i) out.push_back(fact(prefix + " " + std::to_string(i)));
  return out;
}

std::vector<std::string> texts(const std::vector<Fact>& facts) {
  std::vector<std::string> out;
  for (const Fact& f : facts) out.push_back(f.text);
  return out;
}

void expect_same_fact(const Fact& a, const Fact& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.tenant, b.tenant);
  EXPECT_EQ(a.user, b.user);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.timestamp, b.timestamp);
  EXPECT_EQ(a.timestamp_epoch, b.timestamp_epoch);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.turn_index, b.turn_index);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.created_at_ms, b.created_at_ms);
  EXPECT_EQ(a.updated_at_ms, b.updated_at_ms);
  EXPECT_EQ(a.version, b.version);
}

}  // namespace

TEST_P(FactStoreContract, AddAndGetKeepEveryField) {
  auto store = open_store();
  NewFact nf = fact("Caroline went to a support group", "Caroline", "1:56 pm on 8 May, 2023");
  nf.source.conversation = "conv-26";
  nf.source.session = "session_1";
  nf.source.turn = "D1:3";
  nf.metadata = R"({"blip_caption":"a photo"})";
  const int64_t id = store->add_fact("default", "alice", nf);
  const Fact f = store->get("default", "alice", id);
  EXPECT_EQ(f.id, id);
  EXPECT_EQ(f.tenant, "default");
  EXPECT_EQ(f.user, "alice");
  EXPECT_EQ(f.text, nf.text);
  EXPECT_EQ(f.timestamp, "1:56 pm on 8 May, 2023");
  EXPECT_EQ(f.timestamp_epoch, 1683554160);  // 2023-05-08T13:56:00Z
  EXPECT_EQ(f.source, nf.source);
  EXPECT_FALSE(f.turn_index.has_value());
  EXPECT_EQ(f.metadata, nf.metadata);
  EXPECT_EQ(f.version, 1);
  EXPECT_GT(f.created_at_ms, 1'600'000'000'000);
  EXPECT_EQ(f.created_at_ms, f.updated_at_ms);
  EXPECT_EQ(store->count("default", "alice"), 1u);

  const Fact undated = store->get("default", "alice", store->add_fact("default", "alice", fact("no date")));
  EXPECT_EQ(undated.timestamp, "");
  EXPECT_FALSE(undated.timestamp_epoch.has_value());  // a date it cannot read is refused (BadInputIsRejected...)
}

TEST_P(FactStoreContract, BatchAddReturnsIncreasingIdsInInputOrder) {
  auto store = open_store();
  const auto ids = store->add_facts("default", "u", numbered("fact", 50));
  ASSERT_EQ(ids.size(), 50u);
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_GT(ids[i], ids[i - 1]);
  const auto got = store->get_many("default", "u", std::vector<int64_t>{ids[7], ids[2], ids[40]});
  EXPECT_EQ(texts(got), (std::vector<std::string>{"fact 7", "fact 2", "fact 40"}));
  EXPECT_TRUE(store->add_facts("default", "u", {}).empty());
}

// Retrieval hits resolved to facts: the ones deleted since the search, or another user's, drop
// out; the rest keep their order and scores.
TEST_P(FactStoreContract, FetchHitsDropsGoneFactsAndKeepsOrderAndScores) {
  auto store = open_store();
  const auto ids = store->add_facts("default", "u", numbered("fact", 4));
  const auto other = store->add_facts("default", "v", numbered("other", 1));
  store->remove("default", "u", ids[1]);
  const std::vector<ScoredFact> hits{{ids[3], 0.9}, {ids[1], 0.8}, {other[0], 0.7}, {ids[0], 0.5}};
  const auto got = fetch_hits(*store, "default", "u", hits);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].fact.text, "fact 3");
  EXPECT_EQ(got[0].score, 0.9);
  EXPECT_EQ(got[1].fact.text, "fact 0");
  EXPECT_EQ(got[1].score, 0.5);
  EXPECT_TRUE(fetch_hits(*store, "default", "nobody", hits).empty());
  EXPECT_EQ(texts(store->get_existing("default", "u", std::vector<int64_t>{ids[2], ids[1], ids[0]})),
            (std::vector<std::string>{"fact 2", "fact 0"}));
  // One query answers any number of ids, in their order, repeats included.
  EXPECT_EQ(texts(store->get_existing("default", "u", std::vector<int64_t>{ids[0], ids[3], ids[0], other[0], -5})),
            (std::vector<std::string>{"fact 0", "fact 3", "fact 0"}));
  std::vector<int64_t> many;
  for (int i = 0; i < 5000; ++i) many.push_back(ids[static_cast<size_t>(i % 4)]);
  EXPECT_EQ(store->get_existing("default", "u", many).size(), 3750u);  // ids[1] is deleted
  EXPECT_TRUE(store->get_existing("default", "u", std::vector<int64_t>{}).empty());
}

TEST_P(FactStoreContract, ListPaginatesByIdWithoutGapsOrRepeats) {
  auto store = open_store();
  const auto ids = store->add_facts("default", "u", numbered("f", 25));
  store->add_facts("default", "other", numbered("x", 5));  // interleaved ids of another user
  store->add_facts("default", "u", numbered("g", 3));
  std::vector<Fact> all;
  std::vector<size_t> page_sizes;
  ListOptions opt{0, 10};
  for (;;) {
    const auto page = store->list("default", "u", opt);
    if (page.empty()) break;
    page_sizes.push_back(page.size());
    all.insert(all.end(), page.begin(), page.end());
    opt.after_id = page.back().id;
  }
  EXPECT_EQ(page_sizes, (std::vector<size_t>{10, 10, 8}));
  ASSERT_EQ(all.size(), 28u);
  for (size_t i = 0; i < 25; ++i) EXPECT_EQ(all[i].id, ids[i]);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GT(all[i].id, all[i - 1].id);
  for (const Fact& f : all) EXPECT_EQ(f.user, "u");
  EXPECT_TRUE(store->list("default", "u", ListOptions{0, 0}).empty());
  EXPECT_TRUE(store->list("default", "nobody").empty());
}

TEST_P(FactStoreContract, WindowIsThePrecedingTurnsOfTheSameConversationInOrder) {
  auto store = open_store();
  // Two conversations interleaved in id order, plus a free-standing fact.
  const auto a1 = store->add_turns("default", "u", "A", numbered("A", 4));      // A 0..3
  const auto b1 = store->add_turns("default", "u", "B", numbered("B", 3));      // B 0..2
  const int64_t loose = store->add_fact("default", "u", fact("loose fact"));
  const auto a2 = store->add_turns("default", "u", "A", numbered("A+", 3));     // A 4..6 (appended)
  store->add_turns("default", "other", "A", numbered("otherA", 5));            // same name, other user

  EXPECT_EQ(store->get("default", "u", a2[0]).turn_index, 4);
  EXPECT_EQ(store->get("default", "u", a2[0]).source.conversation, "A");

  EXPECT_EQ(texts(store->window("default", "u", a2[1], 3)), (std::vector<std::string>{"A 2", "A 3", "A+ 0"}));
  EXPECT_EQ(texts(store->window("default", "u", a1[2], 100)), (std::vector<std::string>{"A 0", "A 1"}));
  EXPECT_EQ(texts(store->window("default", "u", b1[2], 5)), (std::vector<std::string>{"B 0", "B 1"}));
  EXPECT_TRUE(store->window("default", "u", a1[0], 5).empty());  // first turn
  EXPECT_TRUE(store->window("default", "u", a2[2], 0).empty());  // w = 0
  EXPECT_TRUE(store->window("default", "u", loose, 5).empty());  // the user's first free-standing fact

  // A deleted turn leaves the window: the w preceding turns that still exist.
  store->remove("default", "u", a1[3]);
  EXPECT_EQ(texts(store->window("default", "u", a2[1], 3)), (std::vector<std::string>{"A 1", "A 2", "A+ 0"}));
  expect_error([&] { store->window("default", "other", a2[1], 3); }, ErrorKind::kNotFound, "not found");
}

// A free-standing fact (no conversation) is encoded after the free-standing facts its user wrote
// before it, oldest first: turns, later facts and other users' facts are not in it; a deleted or
// edited one changes the window of the facts after it.
TEST_P(FactStoreContract, TheWindowOfAFreeStandingFactIsTheUsersFactsBeforeIt) {
  auto store = open_store();
  const int64_t f0 = store->add_fact("default", "u", fact("fact 0"));
  store->add_turns("default", "u", "A", numbered("A", 2));
  store->add_fact("default", "other", fact("other's fact"));
  const int64_t f1 = store->add_fact("default", "u", fact("fact 1"));
  const int64_t f2 = store->add_fact("default", "u", fact("fact 2"));
  const int64_t f3 = store->add_fact("default", "u", fact("fact 3"));
  EXPECT_EQ(texts(store->window("default", "u", f3, 2)), (std::vector<std::string>{"fact 1", "fact 2"}));
  EXPECT_EQ(texts(store->window("default", "u", f3, 10)), (std::vector<std::string>{"fact 0", "fact 1", "fact 2"}));
  EXPECT_EQ(texts(store->window("default", "u", f1, 10)), (std::vector<std::string>{"fact 0"}));
  EXPECT_TRUE(store->window("default", "u", f0, 5).empty());
  EXPECT_TRUE(store->window("default", "u", f2, 0).empty());
  store->remove("default", "u", f1);
  EXPECT_EQ(texts(store->window("default", "u", f3, 2)), (std::vector<std::string>{"fact 0", "fact 2"}));
  store->update("default", "u", f2, FactUpdate{std::string("fact 2, edited"), std::nullopt});
  EXPECT_EQ(texts(store->window("default", "u", f3, 1)), (std::vector<std::string>{"fact 2, edited"}));
}

TEST_P(FactStoreContract, UsersAndTenantsAreIsolated) {
  auto store = open_store();
  const int64_t a = store->add_fact("default", "alice", fact("alice secret"));
  const int64_t b = store->add_fact("default", "bob", fact("bob secret"));
  const int64_t t2 = store->add_fact("acme", "alice", fact("acme alice secret"));
  store->put_embeddings("default", "bob", "e", std::vector<EmbeddingRow>{{b, 0, {1.f, 2.f}}});

  EXPECT_EQ(store->get("default", "alice", a).text, "alice secret");
  EXPECT_EQ(store->get("acme", "alice", t2).text, "acme alice secret");
  // Ids are per tenant: acme's first fact has id 1 like default's first; each tenant reaches its own.
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(t2, 1);
  for (int64_t foreign : {b}) {
    expect_error([&] { store->get("default", "alice", foreign); }, ErrorKind::kNotFound, std::to_string(foreign));
    expect_error([&] { store->update("default", "alice", foreign, FactUpdate{"x", {}}); }, ErrorKind::kNotFound, "not found");
    expect_error([&] { store->remove("default", "alice", foreign); }, ErrorKind::kNotFound, "not found");
    expect_error([&] { store->window("default", "alice", foreign, 2); }, ErrorKind::kNotFound, "not found");
    expect_error([&] { store->get_embedding("default", "alice", foreign, "e"); }, ErrorKind::kNotFound, "not found");
    expect_error([&] { store->put_embeddings("default", "alice", "e", std::vector<EmbeddingRow>{{foreign, 0, {1.f, 2.f}}}); },
                 ErrorKind::kNotFound, "not found");
  }
  expect_error([&] { store->get("acme", "alice", b); }, ErrorKind::kNotFound, "not found");  // acme has no fact 2
  expect_error([&] { store->get_many("default", "alice", std::vector<int64_t>{a, b}); }, ErrorKind::kNotFound,
               std::to_string(b));
  EXPECT_EQ(texts(store->list("default", "alice")), (std::vector<std::string>{"alice secret"}));
  EXPECT_EQ(texts(store->list("acme", "alice")), (std::vector<std::string>{"acme alice secret"}));
  EXPECT_TRUE(store->embeddings("default", "alice", "e").ids.empty());
  EXPECT_EQ(store->embeddings("default", "bob", "e").ids, std::vector<int64_t>{b});
  // Nothing of bob's changed.
  EXPECT_EQ(store->get("default", "bob", b).text, "bob secret");
  EXPECT_EQ(store->get("default", "bob", b).version, 1);
  EXPECT_EQ(store->users(), (std::vector<UserRef>{{"acme", "alice"}, {"default", "alice"}, {"default", "bob"}}));
}

TEST_P(FactStoreContract, UpdateBumpsVersionAndDropsStaleEmbeddings) {
  auto store = open_store();
  const int64_t id = store->add_fact("default", "u", fact("old text"));
  store->put_embeddings("default", "u", "e", std::vector<EmbeddingRow>{{id, 1, {1.f, 0.f}}});

  Fact f = store->update("default", "u", id, FactUpdate{std::nullopt, std::string(R"({"k":1})")});
  EXPECT_EQ(f.version, 2);
  EXPECT_EQ(f.metadata, R"({"k":1})");
  EXPECT_TRUE(store->get_embedding("default", "u", id, "e").has_value());  // text unchanged: vector kept

  f = store->update("default", "u", id, FactUpdate{std::string("new text"), std::nullopt});
  EXPECT_EQ(f.version, 3);
  EXPECT_EQ(f.text, "new text");
  EXPECT_GE(f.updated_at_ms, f.created_at_ms);
  EXPECT_FALSE(store->get_embedding("default", "u", id, "e").has_value());  // computed from the old text

  // No change, no new version.
  f = store->update("default", "u", id, FactUpdate{std::string("new text"), std::string(R"({"k":1})")});
  EXPECT_EQ(f.version, 3);
  const Fact g = store->get("default", "u", id);
  EXPECT_EQ(g.version, 3);
  EXPECT_EQ(g.text, "new text");

  // A vector computed from version 1 is refused now; version 3 is accepted.
  EXPECT_EQ(store->put_embeddings("default", "u", "e", std::vector<EmbeddingRow>{{id, 1, {0.f, 1.f}}}), 0u);
  EXPECT_FALSE(store->get_embedding("default", "u", id, "e").has_value());
  EXPECT_EQ(store->put_embeddings("default", "u", "e", std::vector<EmbeddingRow>{{id, 3, {0.f, 1.f}}}), 1u);
}

TEST_P(FactStoreContract, DeleteOneAndDeleteAllOfAUser) {
  auto store = open_store();
  const auto ids = store->add_facts("default", "u", numbered("f", 5));
  store->add_facts("default", "keep", numbered("k", 2));
  store->put_embeddings("default", "u", "e", std::vector<EmbeddingRow>{{ids[1], 0, {1.f}}});

  store->remove("default", "u", ids[1]);
  expect_error([&] { store->get("default", "u", ids[1]); }, ErrorKind::kNotFound, std::to_string(ids[1]));
  expect_error([&] { store->remove("default", "u", ids[1]); }, ErrorKind::kNotFound, "not found");
  EXPECT_EQ(store->count("default", "u"), 4u);
  EXPECT_TRUE(store->embeddings("default", "u", "e").ids.empty());

  // Ids are never reused: KV cached under a deleted id must not match a new fact.
  const int64_t last = store->add_fact("default", "u", fact("after delete"));
  store->remove("default", "u", last);
  EXPECT_GT(store->add_fact("default", "u", fact("newest")), last);

  EXPECT_EQ(store->remove_user("default", "u"), 5u);
  EXPECT_EQ(store->count("default", "u"), 0u);
  EXPECT_TRUE(store->list("default", "u").empty());
  EXPECT_EQ(store->remove_user("default", "u"), 0u);
  EXPECT_EQ(store->count("default", "keep"), 2u);
  EXPECT_EQ(store->users(), (std::vector<UserRef>{{"default", "keep"}}));
  // The user can start over.
  EXPECT_EQ(store->count("default", "u"), 0u);
  store->add_fact("default", "u", fact("again"));
  EXPECT_EQ(store->count("default", "u"), 1u);
}

TEST_P(FactStoreContract, ReopenReloadsEverything) {
  std::vector<Fact> before;
  int64_t turn_id = 0;
  {
    auto store = open_store();
    store->add_facts("default", "u", numbered("f", 3));
    const auto turns = store->add_turns("default", "u", "c", numbered("turn", 4));
    turn_id = turns[3];
    store->update("default", "u", turns[0], FactUpdate{std::string("edited turn"), std::nullopt});
    NewFact with_vec = fact("vector fact", "s", "2024-01-02");
    with_vec.vector = {0.25f, -1.5f, 3.0f};
    store->add_fact("acme", "v", with_vec);
    store->set_setting("kv.fingerprint", "abc123");
    before = store->list("default", "u");
    const auto v = store->list("acme", "v");
    before.insert(before.end(), v.begin(), v.end());
  }
  auto store = open_store(FactStoreOptions{false});
  std::vector<Fact> after = store->list("default", "u");
  const auto v = store->list("acme", "v");
  after.insert(after.end(), v.begin(), v.end());
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) expect_same_fact(after[i], before[i]);
  EXPECT_EQ(texts(store->window("default", "u", turn_id, 2)), (std::vector<std::string>{"turn 1", "turn 2"}));
  EXPECT_EQ(store->get_setting("kv.fingerprint"), "abc123");
  EXPECT_EQ(store->get_embedding("acme", "v", v[0].id, kClientEmbedder), (std::vector<float>{0.25f, -1.5f, 3.0f}));
  // Appending turns continues the conversation's numbering; new ids continue after the old ones.
  const auto more = store->add_turns("default", "u", "c", numbered("turn", 1));
  EXPECT_EQ(store->get("default", "u", more[0]).turn_index, 4);
  EXPECT_GT(more[0], before.back().id);
}

TEST_P(FactStoreContract, Settings) {
  auto store = open_store();
  EXPECT_FALSE(store->get_setting("kv.window").has_value());
  store->set_setting("kv.window", "5");
  store->set_setting("kv.fingerprint", "");
  EXPECT_EQ(store->get_setting("kv.window"), "5");
  store->set_setting("kv.window", "20");
  EXPECT_EQ(store->get_setting("kv.window"), "20");
  EXPECT_EQ(store->get_setting("kv.fingerprint"), "");
  expect_error([&] { store->set_setting("", "x"); }, ErrorKind::kInvalidInput, "setting name is empty");
}

TEST_P(FactStoreContract, EmbeddingsRoundTripBitExact) {
  auto store = open_store();
  const auto ids = store->add_facts("default", "u", numbered("f", 4));
  const std::vector<float> v0 = {1.0f, -0.0f, 3.4028235e38f, 1.17549435e-38f, 0.1f};
  const std::vector<float> v2 = {-1.0f, 2.5f, 1e-45f, 7.0f, -0.3f};
  EXPECT_EQ(store->put_embeddings("default", "u", "m", std::vector<EmbeddingRow>{{ids[2], 0, v2}, {ids[0], 0, v0}}), 2u);
  EXPECT_EQ(store->get_embedding("default", "u", ids[0], "m"), v0);
  EXPECT_FALSE(store->get_embedding("default", "u", ids[1], "m").has_value());
  EXPECT_FALSE(store->get_embedding("default", "u", ids[0], "other").has_value());

  const EmbeddingMatrix m = store->embeddings("default", "u", "m");
  EXPECT_EQ(m.dim, 5);
  EXPECT_EQ(m.ids, (std::vector<int64_t>{ids[0], ids[2]}));  // ascending by id
  std::vector<float> want = v0;
  want.insert(want.end(), v2.begin(), v2.end());
  EXPECT_EQ(m.data, want);

  // Replace keeps one row; another dim for the same embedder is refused.
  store->put_embeddings("default", "u", "m", std::vector<EmbeddingRow>{{ids[0], 0, v2}});
  EXPECT_EQ(store->get_embedding("default", "u", ids[0], "m"), v2);
  expect_error([&] { store->put_embeddings("default", "u", "m", std::vector<EmbeddingRow>{{ids[1], 0, {1.f, 2.f}}}); },
               ErrorKind::kInvalidInput, "dim 5, got dim 2");
  expect_error([&] { store->put_embeddings("default", "u", "m", std::vector<EmbeddingRow>{{ids[1], 0, {NAN, 0, 0, 0, 0}}}); },
               ErrorKind::kInvalidInput, "non-finite");

  const auto missing = store->facts_missing_embedding("default", "u", "m", 10);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].id, ids[1]);
  EXPECT_EQ(missing[1].id, ids[3]);
  EXPECT_EQ(store->facts_missing_embedding("default", "u", "m", 1).size(), 1u);
}

TEST_P(FactStoreContract, ClientVectorsAreStoredWithTheFacts) {
  auto store = open_store();
  std::vector<NewFact> facts = numbered("f", 3);
  facts[0].vector = {1.f, 0.f};
  facts[2].vector = {0.f, 1.f};
  const auto ids = store->add_facts("default", "u", facts);
  const EmbeddingMatrix m = store->embeddings("default", "u", kClientEmbedder);
  EXPECT_EQ(m.ids, (std::vector<int64_t>{ids[0], ids[2]}));
  EXPECT_EQ(m.data, (std::vector<float>{1.f, 0.f, 0.f, 1.f}));
  // A batch with mixed dims is refused as a whole.
  facts[1].vector = {1.f, 2.f, 3.f};
  expect_error([&] { store->add_facts("default", "u", facts); }, ErrorKind::kInvalidInput, "fact 1: vector has dim 3");
  EXPECT_EQ(store->count("default", "u"), 3u);
}

TEST_P(FactStoreContract, BadInputIsRejectedWithANamedError) {
  auto store = open_store();
  expect_error([&] { store->add_fact("default", "u", fact("")); }, ErrorKind::kInvalidInput, "text is empty");
  expect_error([&] { store->add_fact("default", "u", fact(" \n\t ")); }, ErrorKind::kInvalidInput, "text is empty");
  expect_error([&] { store->add_fact("default", "", fact("x")); }, ErrorKind::kInvalidInput, "user name is empty");
  expect_error([&] { store->add_fact("", "u", fact("x")); }, ErrorKind::kInvalidInput, "tenant name is empty");
  expect_error([&] { store->add_fact("default", "a\nb", fact("x")); }, ErrorKind::kInvalidInput, "control character");
  expect_error([&] { store->add_fact("default", "u", fact(std::string(FactStore::kMaxTextBytes + 1, 'x'))); },
               ErrorKind::kInvalidInput, "limit");
  NewFact bad_meta = fact("x");
  bad_meta.metadata = "{not json";
  expect_error([&] { store->add_fact("default", "u", bad_meta); }, ErrorKind::kInvalidInput, "metadata is not valid JSON");
  bad_meta.metadata = "[1, 2]";
  expect_error([&] { store->add_fact("default", "u", bad_meta); }, ErrorKind::kInvalidInput, "metadata must be a JSON object");
  expect_error([&] { store->add_fact("default", "u", fact("x", "", "not-a-date")); }, ErrorKind::kInvalidInput,
               "date 'not-a-date' is not a date");
  // A bad fact in a batch names its index, and nothing of the batch is stored.
  std::vector<NewFact> batch = numbered("ok", 3);
  batch[2].text = "";
  expect_error([&] { store->add_facts("default", "u", batch); }, ErrorKind::kInvalidInput, "fact 2: text is empty");
  EXPECT_EQ(store->count("default", "u"), 0u);

  const int64_t id = store->add_fact("default", "u", fact("x"));
  expect_error([&] { store->get("default", "u", id + 1000); }, ErrorKind::kNotFound, std::to_string(id + 1000));
  expect_error([&] { store->get("default", "nobody", id); }, ErrorKind::kNotFound, "nobody");
  expect_error([&] { store->update("default", "u", id, FactUpdate{std::string(""), {}}); }, ErrorKind::kInvalidInput,
               "text is empty");
  expect_error([&] { store->update("default", "u", id, FactUpdate{{}, std::string("[1,")}); }, ErrorKind::kInvalidInput,
               "metadata");
  expect_error([&] { store->update("default", "u", id, FactUpdate{{}, std::string("\"text\"")}); }, ErrorKind::kInvalidInput,
               "metadata must be a JSON object");
  expect_error([&] { store->update("default", "u", id + 1000, FactUpdate{std::string("y"), {}}); }, ErrorKind::kNotFound,
               "not found");
  expect_error([&] { store->add_turns("default", "u", "", numbered("t", 1)); }, ErrorKind::kInvalidInput,
               "conversation name is empty");
  EXPECT_EQ(store->get("default", "u", id).version, 1);
}

TEST_P(FactStoreContract, DurableCommitsAndSchemaVersion) {
  {
    auto store = open_store();
    if (on_postgres()) {
      EXPECT_EQ(store->engine_setting("synchronous_commit"), "on");
      EXPECT_EQ(store->engine_setting("fsync"), "on");
    } else {
      EXPECT_EQ(store->engine_setting("journal_mode"), "wal");
      EXPECT_EQ(store->engine_setting("synchronous"), "2");  // FULL
      EXPECT_EQ(store->engine_setting("foreign_keys"), "1");
      EXPECT_EQ(store->describe(), where->where() + "/memory.db");
    }
  }
  where->exec_raw("UPDATE schema_version SET version = version + 1");
  expect_error([&] { open_store(); }, ErrorKind::kUnsupported, "newer than this build");
}

// A database with no store is found only when allowed to be created.
TEST_P(FactStoreContract, OpenWithoutCreateNeedsAStore) {
  expect_error([&] { open_store(FactStoreOptions{false}); }, ErrorKind::kNotFound, "no memory store");
  open_store();
  EXPECT_EQ(open_store(FactStoreOptions{false})->count("t", "u"), 0u);
}

TEST(FactStore, OpenWithoutCreateNeedsAnExistingStore) {
  TempDir dir;
  expect_error([&] { FactStore::open(dir.path() / "absent", FactStoreOptions{false}); }, ErrorKind::kNotFound,
               "no memory store");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "absent"));
  FactStore::open(dir.path() / "nested" / "dir");  // creates parents
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "nested" / "dir" / "memory.db"));
  // Not a database.
  std::filesystem::create_directories(dir.path() / "junk");
  { std::ofstream(dir.path() / "junk" / "memory.db") << "this is not sqlite, just some text that is long enough......"; }
  EXPECT_THROW(FactStore::open(dir.path() / "junk"), Error);
}

namespace {
struct RecordingListener : FactStoreListener {
  std::vector<std::string> events;
  void on_facts_added(std::span<const Fact> facts) override {
    for (const Fact& f : facts) events.push_back("add " + f.user + " " + f.text);
  }
  void on_fact_updated(const Fact& f, bool text_changed) override {
    events.push_back("update " + f.text + (text_changed ? " text" : " meta") + " v" + std::to_string(f.version));
  }
  void on_facts_deleted(std::string_view, std::string_view user, std::span<const int64_t> ids,
                        std::span<const int64_t>) override {
    events.push_back("delete " + std::string(user) + " " + std::to_string(ids.size()));
  }
  void on_embeddings_put(std::string_view, std::string_view user, std::string_view embedder,
                         std::span<const int64_t> ids, std::span<const float>, int32_t dim) override {
    events.push_back("vec " + std::string(user) + " " + std::string(embedder) + " " + std::to_string(ids.size()) + "x" +
                     std::to_string(dim));
  }
  void on_reset() override { events.push_back("reset"); }
};
}  // namespace

TEST_P(FactStoreContract, ListenersSeeAReplayThenEveryCommittedChange) {
  auto store = open_store();
  NewFact a = fact("a");
  a.vector = {1.f, 2.f};
  store->add_fact("default", "u", a);
  RecordingListener l;
  store->attach(&l);
  EXPECT_EQ(l.events, (std::vector<std::string>{"add u a", "vec u client 1x2"}));
  l.events.clear();
  const int64_t b = store->add_fact("default", "v", fact("b"));
  store->update("default", "v", b, FactUpdate{std::string("b2"), {}});
  store->update("default", "v", b, FactUpdate{{}, std::string("{}")});
  EXPECT_THROW(store->add_fact("default", "v", fact("")), Error);  // failed writes send nothing
  store->remove("default", "v", b);
  store->remove_user("default", "u");
  store->detach(&l);
  store->add_fact("default", "u", fact("unseen"));
  EXPECT_EQ(l.events, (std::vector<std::string>{"add v b", "update b2 text v2", "update b2 meta v3", "delete v 1",
                                                "delete u 1"}));
}

TEST_P(FactStoreContract, ConcurrentWritersAndReaders) {
  auto store = open_store();
  Bm25Retriever bm25(*store);
  constexpr int kWriters = 3, kPerWriter = 60;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> searches{0};
  std::thread reader([&] {
    while (!stop) {
      for (int w = 0; w < kWriters; ++w) {
        for (const ScoredFact& h : bm25.search("default", "user" + std::to_string(w), "common words", 5)) {
          try {
            EXPECT_EQ(store->get("default", "user" + std::to_string(w), h.id).user, "user" + std::to_string(w));
          } catch (const Error&) {
            // Deleted since the search (a writer raced us); then it is nobody's, in particular
            // not another user's.
            for (int v = 0; v < kWriters; ++v)
              EXPECT_THROW(store->get("default", "user" + std::to_string(v), h.id), Error) << h.id;
          }
        }
      }
      ++searches;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const std::string user = "user" + std::to_string(w);
      for (int i = 0; i < kPerWriter; ++i) {
        const int64_t id = store->add_fact("default", user, fact("common words " + std::to_string(i)));
        if (i % 10 == 0) store->update("default", user, id, FactUpdate{std::string("common words edited"), {}});
        if (i % 15 == 0) store->remove("default", user, id);
      }
    });
  }
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_GT(searches.load(), 0);
  for (int w = 0; w < kWriters; ++w) {
    const std::string user = "user" + std::to_string(w);
    EXPECT_EQ(store->count("default", user), static_cast<size_t>(kPerWriter - 4));
    EXPECT_EQ(bm25.indexed("default", user), store->count("default", user));
  }
}

// Two stores on one directory are two SQLite connections, as two processes have. A read must not
// leave a statement open that pins its connection to an old snapshot: the other writer's facts
// must be visible at the next read, and this connection's next write must not fail with
// "database is locked".
TEST_P(FactStoreContract, TwoConnectionsOnOneDirectorySeeEachOthersWrites) {
  auto a = open_store();
  auto b = open_store();
  a->add_fact("default", "u", fact("from a"));
  EXPECT_EQ(a->count("default", "u"), 1u);
  EXPECT_EQ(a->get_setting("missing"), std::nullopt);
  EXPECT_EQ(a->list("default", "u").size(), 1u);
  b->add_fact("default", "u", fact("from b"));
  EXPECT_EQ(a->count("default", "u"), 2u);
  EXPECT_EQ(texts(a->list("default", "u")), (std::vector<std::string>{"from a", "from b"}));
  a->add_fact("default", "u", fact("from a again"));
  b->add_fact("default", "u", fact("from b again"));
  EXPECT_EQ(b->count("default", "u"), 4u);
  EXPECT_EQ(a->count("default", "u"), 4u);
}

// A store follows another process's writes (here another connection) through the change log:
// refresh() replays them to its listeners, so its BM25 index finds the other writer's facts and
// forgets the ones it deleted.
TEST_P(FactStoreContract, RefreshReplaysAnotherWritersChangesToTheListeners) {
  auto a = open_store();
  auto b = open_store();
  a->add_fact("default", "u", fact("the red bicycle"));
  Bm25Retriever bm25(*a);
  RecordingListener l;
  a->attach(&l);
  l.events.clear();
  EXPECT_FALSE(a->refresh());  // nothing new: one PRAGMA
  NewFact v = fact("a green kayak");
  v.vector = {0.5f, 0.25f};
  const int64_t kayak = b->add_fact("default", "u", v);
  const int64_t boat = b->add_fact("default", "w", fact("an old boat"));
  b->update("default", "w", boat, FactUpdate{std::string("an old sailing boat"), {}});
  const int64_t gone = b->add_fact("default", "u", fact("a bicycle bell"));
  b->remove("default", "u", gone);
  EXPECT_TRUE(bm25.search("default", "u", "kayak", 5).empty());  // not seen yet
  // PostgreSQL hears of another writer's commits by NOTIFY, asynchronously (or its once-a-second
  // check): refresh until they arrive, as retrievals do.
  bool replayed = false;
  for (int i = 0; i < 400 && !replayed; ++i) {
    replayed = a->refresh();
    if (!replayed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(replayed);
  // The added-then-deleted fact is skipped at its add (gone) and reported at its delete.
  EXPECT_EQ(l.events, (std::vector<std::string>{"add u a green kayak", "vec u client 1x2", "add w an old sailing boat",
                                                "update an old sailing boat text v2", "delete u 1"}));
  const auto hits = bm25.search("default", "u", "kayak", 5);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].id, kayak);
  EXPECT_EQ(bm25.indexed("default", "u"), 2u);
  EXPECT_FALSE(a->refresh());
  // This store's own writes reach its listeners at once, and the other's only at refresh.
  l.events.clear();
  a->remove_user("default", "w");
  EXPECT_EQ(l.events, (std::vector<std::string>{"delete w 1"}));
  EXPECT_EQ(b->count("default", "w"), 0u);
}

// A store that fell behind the change log's retention reloads everything instead of missing the
// pruned changes.
TEST_P(FactStoreContract, RefreshAfterPrunedChangesReloadsEverything) {
  auto a = open_store();
  auto b = open_store();
  RecordingListener l;
  a->attach(&l);
  const int64_t gone = b->add_fact("default", "u", fact("soon deleted"));
  b->remove("default", "u", gone);
  b->add_fact("default", "u", fact("kept"));
  where->exec_raw("DELETE FROM changes");  // what pruning does to rows older than the retention
  b->add_fact("default", "u", fact("after the gap"));
  EXPECT_TRUE(a->refresh());
  EXPECT_EQ(l.events, (std::vector<std::string>{"reset", "add u kept", "add u after the gap"}));
}

namespace {
struct SourceListener : FactStoreListener {
  std::vector<std::string> events;
  void on_facts_added(std::span<const Fact> facts, ChangeSource source) override {
    const char* from = source == ChangeSource::kThisProcess ? "this" : source == ChangeSource::kOtherProcess ? "other" : "contents";
    for (const Fact& f : facts) events.push_back(std::string(from) + " " + f.text);
  }
};
}  // namespace

// Listeners learn where added facts come from: the contents at attach, this store's writes, or
// another process's, also when a write of this store catches up with them first.
TEST_P(FactStoreContract, AddedFactsSayWhichProcessWroteThem) {
  auto a = open_store();
  auto b = open_store();
  a->add_fact("default", "u", fact("before"));
  SourceListener l;
  a->attach(&l);
  a->add_fact("default", "u", fact("mine"));
  b->add_fact("default", "u", fact("theirs"));
  a->refresh();
  b->add_fact("default", "u", fact("theirs again"));
  a->add_fact("default", "u", fact("mine again"));  // catches up with b's first
  EXPECT_EQ(l.events, (std::vector<std::string>{"contents before", "this mine", "other theirs", "other theirs again",
                                                "this mine again"}));
}

// Another process's write is noticed without any call of this store's: refresh() finds it within
// a second (SQLite: data_version at once; PostgreSQL: the NOTIFY doorbell, or the once-a-second
// catch-up).
TEST_P(FactStoreContract, AnotherProcesssWriteIsNoticedWithinASecond) {
  auto a = open_store();
  auto b = open_store();
  RecordingListener l;
  a->attach(&l);
  EXPECT_FALSE(a->refresh());
  b->add_fact("default", "u", fact("news"));
  const auto t0 = std::chrono::steady_clock::now();
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)) {
    seen = a->refresh();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(seen);
  EXPECT_LT(ms, 1000.0);
  EXPECT_EQ(l.events, (std::vector<std::string>{"add u news"}));
}

// A write that cannot get the write lock in time (another writer stuck in its transaction) fails
// as kResource after the engine's wait (SQLite's busy timeout, PostgreSQL's lock_timeout: 5 s)
// and leaves nothing behind: once the lock is free the next write goes through.
TEST_P(FactStoreContract, AWriteThatWaitsTooLongForTheLockFailsAndTheStoreCarriesOn) {
  auto store = open_store();
  store->add_fact("default", "u", fact("before"));
  {
    inferscale::testing::WriteLockHolder stuck(*where);
    expect_error([&] { store->add_fact("default", "u", fact("blocked")); }, ErrorKind::kResource, "");
  }
  store->add_fact("default", "u", fact("after"));
  EXPECT_EQ(texts(store->list("default", "u")), (std::vector<std::string>{"before", "after"}));
}

// A request composes the facts it retrieved; one deleted meanwhile still has its window (the
// turns before it), so the request is served as retrieved instead of failing with "not found".
TEST_P(FactStoreContract, TheWindowOfAFactReadBeforeItsDeletionIsStillAnswered) {
  auto store = open_store();
  const auto ids = store->add_turns("default", "u", "c", numbered("turn", 3));
  const Fact last = store->get("default", "u", ids[2]);
  store->remove("default", "u", ids[2]);
  EXPECT_EQ(texts(store->window(last, 2)), (std::vector<std::string>{"turn 0", "turn 1"}));
  expect_error([&] { store->window("default", "u", ids[2], 2); }, ErrorKind::kNotFound, "not found");  // by id: gone
  store->remove_user("default", "u");
  EXPECT_TRUE(store->window(last, 2).empty());
  // Vectors computed from a version of a fact that is gone are skipped, not an error.
  const int64_t f = store->add_fact("default", "v", fact("x"));
  store->remove("default", "v", f);
  store->add_fact("default", "v", fact("y"));
  EXPECT_EQ(store->put_embeddings("default", "v", "e", std::vector<EmbeddingRow>{{f, 1, {1.f}}}), 0u);
  store->remove_user("default", "v");
  EXPECT_EQ(store->put_embeddings("default", "v", "e", std::vector<EmbeddingRow>{{f, 1, {1.f}}}), 0u);
}

// Issue 11, defect 7: fact ids count per tenant (a tenant cannot read other tenants' write volume
// off its ids), and a tenant never gets an id back after a delete.
TEST_P(FactStoreContract, IdsArePerTenantAndNeverReused) {
  auto store = open_store();
  EXPECT_EQ(store->add_facts("a", "u", numbered("a", 3)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(store->add_facts("b", "u", numbered("b", 2)), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(store->add_turns("a", "v", "c", numbered("turn", 2)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(store->get("a", "u", 1).text, "a 0");
  EXPECT_EQ(store->get("b", "u", 1).text, "b 0");
  store->remove("a", "v", 5);
  EXPECT_EQ(store->add_fact("a", "u", fact("after a delete")), 6);
  store->remove_user("a", "u");
  store->remove_user("a", "v");
  EXPECT_EQ(store->add_fact("a", "u", fact("after deleting everything")), 7);
  EXPECT_EQ(store->add_fact("b", "w", fact("b again")), 3);
  // The same id in two tenants is two facts, each with a key of its own.
  EXPECT_NE(store->get("a", "u", 7).key, store->get("b", "w", 3).key);
  store.reset();
  store = open_store();
  EXPECT_EQ(store->add_fact("b", "w", fact("after a restart")), 4);
}

// A database of an older schema (one counter for every tenant) keeps every id a client has seen,
// and each tenant's new ids start above the highest id ever given, deleted ones included.
TEST(FactStore, MigratedIdsStayAndNewOnesStartAboveEveryOldOne) {
  TempDir dir;
  {
    sqlite::Db raw((dir.path() / "memory.db").string(), true);
    migrate_schema(raw, 2);
    raw.exec(
        "INSERT INTO users (user_key, tenant, user, created_at_ms) VALUES (1, 'a', 'u', 0), (2, 'b', 'u', 0);"
        "INSERT INTO facts (id, user_key, text, created_at_ms, updated_at_ms) VALUES (1, 1, 'a one', 0, 0), "
        "(2, 2, 'b two', 0, 0), (3, 1, 'a three', 0, 0), (4, 2, 'b four, deleted', 0, 0);"
        "DELETE FROM facts WHERE id = 4;");
  }
  auto store = FactStore::open(dir.path());
  EXPECT_EQ(texts(store->list("a", "u")), (std::vector<std::string>{"a one", "a three"}));
  EXPECT_EQ(store->get("a", "u", 3).text, "a three");
  EXPECT_EQ(store->get("b", "u", 2).text, "b two");
  EXPECT_EQ(store->get("b", "u", 2).key, 2);
  EXPECT_EQ(store->add_fact("a", "u", fact("new a")), 5);
  EXPECT_EQ(store->add_fact("b", "u", fact("new b")), 5);
  EXPECT_EQ(store->add_fact("c", "u", fact("a new tenant")), 5);
}

// Idempotency keys: the first answer comes back for the same request within 24 hours, the same key
// names another write in another tenant, another request under a live key is refused, and an
// expired key is a new write.
TEST_P(FactStoreContract, IdempotencyKeysReplayTheFirstAnswerForADayPerTenant) {
  auto store = open_store();
  auto idem = [](const std::string& key, const std::string& request) {
    Idempotency i;
    i.key = key;
    i.request_hash = request;
    i.render = [](const WriteResult& r) { return "ids " + std::to_string(r.ids.at(0)); };
    return i;
  };
  Idempotency first = idem("k1", "add x");
  EXPECT_EQ(store->add_facts("a", "u", std::vector<NewFact>{fact("x")}, &first), (std::vector<int64_t>{1}));
  EXPECT_FALSE(first.replayed);
  EXPECT_EQ(first.answer, "ids 1");
  Idempotency retry = idem("k1", "add x");
  EXPECT_TRUE(store->add_facts("a", "u", std::vector<NewFact>{fact("x")}, &retry).empty());
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(retry.answer, "ids 1");
  EXPECT_EQ(store->count("a", "u"), 1u);
  Idempotency other_tenant = idem("k1", "add x");
  store->add_facts("b", "u", std::vector<NewFact>{fact("x")}, &other_tenant);
  EXPECT_FALSE(other_tenant.replayed);
  Idempotency other_request = idem("k1", "add y");
  EXPECT_THROW(store->add_facts("a", "u", std::vector<NewFact>{fact("y")}, &other_request), IdempotencyKeyReused);
  EXPECT_EQ(store->count("a", "u"), 1u);
  // A retry after a restart (another connection) is answered from the database.
  store.reset();
  store = open_store();
  Idempotency later = idem("k1", "add x");
  store->add_facts("a", "u", std::vector<NewFact>{fact("x")}, &later);
  EXPECT_TRUE(later.replayed);
  where->exec_raw("UPDATE idempotency SET created_at_ms = created_at_ms - 25 * 3600 * 1000");
  Idempotency expired = idem("k1", "add x");
  EXPECT_EQ(store->add_facts("a", "u", std::vector<NewFact>{fact("x")}, &expired), (std::vector<int64_t>{2}));
  EXPECT_FALSE(expired.replayed);
  EXPECT_EQ(store->count("a", "u"), 2u);
}
