// MemoryKvPool: entries keyed by (fact, version, window, window tokens); several windows of one
// fact resident at once; stale entries dropped; pins; LRU eviction; every block returned.
#include <gtest/gtest.h>

#include "memory/kv/kv_pool.h"
#include "util/check.h"

using namespace inferscale;

namespace {
FactKvKey key(int64_t id, int64_t version, int32_t w, uint64_t hash = 0) { return {id, version, w, hash}; }
}  // namespace

TEST(KvPool, SeveralWindowsOfOneFactAreResidentTogether) {
  MemoryKvPool pool(16, 4);
  const auto& a = pool.allocate(key(7, 1, 0), 5);  // 2 blocks
  pool.pin(a.key);
  const auto& b = pool.allocate(key(7, 1, 2, 99), 5);  // another window: both stay
  pool.pin(b.key);
  EXPECT_NE(pool.find(key(7, 1, 0)), nullptr);
  EXPECT_NE(pool.find(key(7, 1, 2, 99)), nullptr);
  EXPECT_EQ(pool.num_entries(), 2);
  EXPECT_EQ(pool.num_free_blocks(), 12);
  pool.unpin(key(7, 1, 0));
  pool.unpin(key(7, 1, 2, 99));
  pool.erase_fact(7);
  EXPECT_EQ(pool.num_entries(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 16);
}

TEST(KvPool, ANewVersionOrOtherWindowTurnsMakeOldEntriesStale) {
  MemoryKvPool pool(16, 4);
  pool.allocate(key(3, 1, 0), 4);
  pool.allocate(key(3, 1, 2, 11), 4);
  // The same window over other turns replaces that window's entry only.
  pool.allocate(key(3, 1, 2, 12), 4);
  EXPECT_EQ(pool.find(key(3, 1, 2, 11)), nullptr);
  EXPECT_NE(pool.find(key(3, 1, 0)), nullptr);
  // A new version replaces every window of the old one.
  pool.allocate(key(3, 2, 0), 4);
  EXPECT_EQ(pool.find(key(3, 1, 0)), nullptr);
  EXPECT_EQ(pool.find(key(3, 1, 2, 12)), nullptr);
  EXPECT_EQ(pool.num_entries(), 1);
  EXPECT_EQ(pool.num_free_blocks(), 15);
}

TEST(KvPool, PinnedStaleEntriesGoAtTheirLastUnpin) {
  MemoryKvPool pool(8, 4);
  const auto& old = pool.allocate(key(1, 1, 0), 8);
  pool.pin(old.key);
  pool.allocate(key(1, 2, 0), 4);  // stale while pinned: not found, its blocks still held
  EXPECT_EQ(pool.find(key(1, 1, 0)), nullptr);
  EXPECT_EQ(pool.num_free_blocks(), 5);
  pool.unpin(key(1, 1, 0));
  EXPECT_EQ(pool.num_free_blocks(), 7);
  // The same key resident and pinned cannot be re-encoded under a request that holds it.
  pool.pin(key(1, 2, 0));
  try {
    pool.allocate(key(1, 2, 0), 4);
    FAIL() << "allocated a pinned key";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
  }
  pool.unpin(key(1, 2, 0));
}

TEST(KvPool, EvictsLeastRecentlyUsedUnpinnedEntries) {
  MemoryKvPool pool(4, 4);
  pool.allocate(key(1, 1, 0), 4);
  pool.allocate(key(2, 1, 0), 4);
  pool.allocate(key(3, 1, 0), 4);
  pool.allocate(key(4, 1, 0), 4);
  pool.pin(key(1, 1, 0));
  ASSERT_NE(pool.find(key(2, 1, 0)), nullptr);  // 2 becomes most recent
  pool.allocate(key(5, 1, 0), 8);                // evicts 3 then 4 (LRU); never the pinned 1
  EXPECT_NE(pool.find(key(1, 1, 0)), nullptr);
  EXPECT_EQ(pool.find(key(3, 1, 0)), nullptr);
  EXPECT_EQ(pool.find(key(4, 1, 0)), nullptr);
  EXPECT_EQ(pool.num_evictions(), 2);
  pool.unpin(key(1, 1, 0));
  pool.clear();
  EXPECT_EQ(pool.num_free_blocks(), 4);
}
