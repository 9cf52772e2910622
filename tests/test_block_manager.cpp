#include <gtest/gtest.h>

#include <vector>

#include "engine/block_manager.h"
#include "engine/prefix_hash.h"
#include "util/check.h"

using namespace inferscale;

TEST(BlockManager, AllocatesInLruOrderAndFreesEverything) {
  BlockManager bm(4, 2);
  EXPECT_EQ(bm.num_free(), 4);
  const int32_t a = bm.allocate(), b = bm.allocate(), c = bm.allocate();
  EXPECT_EQ(bm.num_free(), 1);
  bm.release(b);
  bm.release(a);
  // Least recently released first: the never-used block 3, then b, then a.
  EXPECT_EQ(bm.allocate(), 3);
  EXPECT_EQ(bm.allocate(), b);
  EXPECT_EQ(bm.allocate(), a);
  EXPECT_FALSE(bm.can_allocate(1));
  EXPECT_THROW(bm.allocate(), Error);
  for (int32_t x : {a, b, c, 3}) bm.release(x);
  EXPECT_EQ(bm.num_free(), 4);
  EXPECT_THROW(bm.release(a), Error);  // double release is a bug, caught
}

TEST(BlockManager, PrefixLookupConfirmsTokensAndSurvivesRelease) {
  BlockManager bm(3, 2);
  const std::vector<int32_t> t1{5, 6}, t2{5, 7};
  const uint64_t h1 = prefix_block_hash(0, 0, t1);
  const int32_t b = bm.allocate();
  bm.publish(b, h1, t1);
  EXPECT_EQ(bm.num_cached(), 1);
  // Same hash, different tokens (a forced collision): no hit.
  EXPECT_FALSE(bm.lookup(h1, t2).has_value());
  auto hit = bm.lookup(h1, t1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, b);
  EXPECT_EQ(bm.ref_count(b), 2);
  bm.release(b);
  bm.release(b);
  // Free but still cached: a lookup revives it and takes it off the free list.
  EXPECT_EQ(bm.num_free(), 3);
  hit = bm.lookup(h1, t1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(bm.num_free(), 2);
  bm.release(*hit);
  // Reuse for something else drops the cached prefix once the block is allocated again.
  bm.allocate();
  bm.allocate();
  const int32_t reused = bm.allocate();
  EXPECT_EQ(reused, b);
  EXPECT_EQ(bm.num_cached(), 0);
  EXPECT_FALSE(bm.lookup(h1, t1).has_value());
}

TEST(BlockManager, ExtraKeysSeparateEqualTokens) {
  const std::vector<int32_t> t{1, 2, 3, 4};
  EXPECT_NE(prefix_block_hash(0, 0, t), prefix_block_hash(0, 42, t));
  EXPECT_NE(prefix_block_hash(0, 0, t), prefix_block_hash(1, 0, t));
  EXPECT_EQ(prefix_block_hash(9, 3, t), prefix_block_hash(9, 3, t));
}
