// FactStore's audit trail (memory/store/fact_history.h) and its lookups by id alone: every add, update
// and delete leaves one event with the text and metadata before and after, in the write's own
// transaction; history outlives the fact and stays inside its tenant; a migrated store gets the
// ADD events of the facts that never changed.
#include <gtest/gtest.h>

#include "memory/retrieval/bm25_retriever.h"
#include "memory/store/fact_store.h"
#include "memory/store/schema.h"
#include "memory/store/sqlite.h"
#include "store_backends.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using inferscale::testing::TempDir;

// On both engines (store_backends.h); the migration of an older SQLite store on SQLite alone.
class FactHistory : public inferscale::testing::StoreTest {};
INSTANTIATE_STORE_TESTS(FactHistory);

namespace {

NewFact note(std::string text, std::string metadata = "") {
  NewFact f;
  f.text = std::move(text);
  f.metadata = std::move(metadata);
  return f;
}

std::vector<std::string> kinds(const std::vector<FactEvent>& events) {
  std::vector<std::string> out;
  for (const FactEvent& e : events) out.push_back(fact_event_name(e.kind));
  return out;
}

using Strings = std::vector<std::string>;

}  // namespace

TEST_P(FactHistory, EveryChangeLeavesOneEventWithTheTextsBeforeAndAfter) {
  auto store = open_store();
  const int64_t id = store->add_fact("t", "alice", note("Alice has a cat", R"({"topic":"pets"})"));
  const Fact added = store->get("t", "alice", id);
  store->update("t", "alice", id, FactUpdate{std::string("Alice has two cats"), std::nullopt});
  store->update("t", "alice", id, FactUpdate{std::nullopt, std::string()});          // metadata cleared
  store->update("t", "alice", id, FactUpdate{std::string("Alice has two cats"), std::nullopt});  // no change: no event
  store->remove("t", "alice", id);

  const std::vector<FactEvent> h = store->history("t", id);
  ASSERT_EQ(kinds(h), (Strings{"ADD", "UPDATE", "UPDATE", "DELETE"}));
  for (const FactEvent& e : h) {
    EXPECT_EQ(e.tenant, "t");
    EXPECT_EQ(e.user, "alice");
    EXPECT_EQ(e.fact_id, id);
  }
  EXPECT_FALSE(h[0].old_text.has_value());
  EXPECT_EQ(h[0].new_text, "Alice has a cat");
  EXPECT_EQ(h[0].new_metadata, R"({"topic":"pets"})");
  EXPECT_EQ(h[0].at_ms, added.created_at_ms);
  EXPECT_EQ(h[1].old_text, "Alice has a cat");
  EXPECT_EQ(h[1].new_text, "Alice has two cats");
  EXPECT_EQ(h[1].old_metadata, h[1].new_metadata);
  EXPECT_EQ(h[2].old_metadata, R"({"topic":"pets"})");
  EXPECT_EQ(h[2].new_metadata, "");
  EXPECT_EQ(h[3].old_text, "Alice has two cats");
  EXPECT_FALSE(h[3].new_text.has_value());
  EXPECT_FALSE(h[3].new_metadata.has_value());
  for (size_t i = 1; i < h.size(); ++i) {
    EXPECT_GT(h[i].seq, h[i - 1].seq);
    EXPECT_GE(h[i].at_ms, h[i - 1].at_ms);
  }
  // The fact is gone; its history is not, and it survives a restart.
  EXPECT_FALSE(store->find("t", id).has_value());
  store.reset();
  store = open_store();
  EXPECT_EQ(kinds(store->history("t", id)), (Strings{"ADD", "UPDATE", "UPDATE", "DELETE"}));
}

TEST_P(FactHistory, FindAndHistoryStayInsideTheTenant) {
  auto store = open_store();
  const int64_t a = store->add_fact("acme", "alice", note("acme's fact"));
  const int64_t b = store->add_fact("acme", "bob", note("bob's fact"));
  const int64_t other = store->add_fact("globex", "alice", note("globex's fact"));
  ASSERT_EQ(a, other);  // ids count per tenant: the same number names two facts
  EXPECT_EQ(store->find("acme", a)->text, "acme's fact");
  EXPECT_EQ(store->find("acme", b)->user, "bob");
  EXPECT_EQ(store->find("globex", a)->text, "globex's fact");
  EXPECT_FALSE(store->find("globex", b).has_value());
  EXPECT_FALSE(store->find("nobody", a).has_value());
  EXPECT_EQ(store->history("acme", a).at(0).new_text, "acme's fact");
  EXPECT_EQ(store->history("globex", a).at(0).new_text, "globex's fact");
  EXPECT_TRUE(store->history("globex", b).empty());
  EXPECT_TRUE(store->history("acme", 99).empty());
}

TEST_P(FactHistory, BulkDeletesRecordEachFactAndReachTheListeners) {
  auto store = open_store();
  Bm25Retriever bm25(*store);
  const auto ids = store->add_facts("t", "u", std::vector<NewFact>{note("red apple"), note("green apple"), note("blue sky")});
  const std::vector<int64_t> doomed = {ids[0], ids[2], 1234};  // an id that is not the user's is skipped
  EXPECT_EQ(store->remove_existing("t", "u", doomed), 2u);
  EXPECT_EQ(store->remove_existing("t", "u", doomed), 0u);
  EXPECT_EQ(store->remove_existing("t", "nobody", doomed), 0u);
  EXPECT_EQ(kinds(store->history("t", ids[0])), (Strings{"ADD", "DELETE"}));
  EXPECT_EQ(kinds(store->history("t", ids[1])), (Strings{"ADD"}));
  const auto hits = bm25.search("t", "u", "apple sky", 10);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].id, ids[1]);

  EXPECT_EQ(store->remove_user("t", "u"), 1u);
  const auto h = store->history("t", ids[1]);
  EXPECT_EQ(kinds(h), (Strings{"ADD", "DELETE"}));
  EXPECT_EQ(h[1].old_text, "green apple");
}

TEST_P(FactHistory, AReplayedIdempotentWriteAddsNoEvent) {
  auto store = open_store();
  auto idem = [] {
    Idempotency i;
    i.key = "k";
    i.request_hash = "add";
    i.render = [](const WriteResult& r) { return std::to_string(r.ids.at(0)); };
    return i;
  };
  Idempotency first = idem(), retry = idem();
  const int64_t id = store->add_facts("t", "u", std::vector<NewFact>{note("once")}, &first).at(0);
  EXPECT_TRUE(store->add_facts("t", "u", std::vector<NewFact>{note("once")}, &retry).empty());
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(store->history("t", id).size(), 1u);
  EXPECT_TRUE(store->history("t", id + 1).empty());
}

// Events and changes commit together: a second connection that sees one sees the other.
TEST_P(FactHistory, TheEventIsCommittedWithTheChange) {
  auto writer = open_store();
  auto reader = open_store();
  for (int i = 0; i < 20; ++i) {
    const int64_t id = writer->add_fact("t", "u", note("fact " + std::to_string(i)));
    EXPECT_TRUE(reader->find("t", id).has_value());
    EXPECT_EQ(reader->history("t", id).size(), 1u);
    writer->remove("t", "u", id);
    EXPECT_FALSE(reader->find("t", id).has_value());
    EXPECT_EQ(reader->history("t", id).size(), 2u);
  }
}

// A v4 store: facts that never changed get their ADD event at migration, with their own time;
// a fact changed before has no event for a past the store did not record.
TEST(FactHistoryMigration, MigrationGivesUnchangedFactsTheirAddEvent) {
  TempDir dir;
  {
    sqlite::Db raw((dir.path() / "memory.db").string(), true);
    migrate_schema(raw, 4);
    raw.exec(
        "INSERT INTO users (user_key, tenant, user, created_at_ms) VALUES (1, 'a', 'u', 0);"
        "INSERT INTO tenants (tenant, last_fact_id) VALUES ('a', 2);"
        "INSERT INTO facts (id, public_id, user_key, text, metadata, created_at_ms, updated_at_ms, version) VALUES "
        "(1, 1, 1, 'never changed', '{\"k\":1}', 1000, 1000, 1), (2, 2, 1, 'edited', '', 1000, 5000, 3);");
  }
  auto store = FactStore::open(dir.path());
  const auto h = store->history("a", 1);
  ASSERT_EQ(kinds(h), (Strings{"ADD"}));
  EXPECT_EQ(h[0].new_text, "never changed");
  EXPECT_EQ(h[0].new_metadata, "{\"k\":1}");
  EXPECT_EQ(h[0].at_ms, 1000);
  EXPECT_TRUE(store->history("a", 2).empty());
  store->update("a", "u", 2, FactUpdate{std::string("edited again"), std::nullopt});
  EXPECT_EQ(kinds(store->history("a", 2)), (Strings{"UPDATE"}));
  EXPECT_EQ(store->find("a", 2)->text, "edited again");
}
