// The GPU vector index against the CPU index (its twin): the same writes (adds, replaces,
// removes that move rows, clears, growth) on both, then searches at odd dims and every k path
// (kernel k, k >= N, k above the kernel's 1024 limit) must agree; concurrent searches too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "memory/cuda/cuda_vector_index.h"
#include "cuda_test_util.h"
#include "memory/retrieval/cpu_vector_index.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

// Same ranking as the CPU index: scores rank by rank within f32 noise, ids equal unless two
// scores are that close.
void expect_same(const std::vector<ScoredFact>& gpu, const std::vector<ScoredFact>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  std::vector<float> gs, cs;
  for (size_t i = 0; i < gpu.size(); ++i) {
    gs.push_back(static_cast<float>(gpu[i].score));
    cs.push_back(static_cast<float>(cpu[i].score));
    if (gpu[i].id != cpu[i].id)
      EXPECT_NEAR(gpu[i].score, cpu[i].score, 1e-4 * (1 + std::abs(cpu[i].score))) << what << " rank " << i;
    if (i > 0) EXPECT_TRUE(ranks_before(gpu[i - 1], gpu[i])) << what << " rank " << i << " out of order";
  }
  record(what, compare(gs, cs), 1e-5);
}

}  // namespace

TEST(CudaVectorIndex, MatchesTheCpuIndexThroughWritesAndEveryKPath) {
  REQUIRE_GPU();
  for (int32_t dim : {1, 37, 384, 1000}) {
    CpuVectorIndex cpu(dim);
    auto gpu = make_cuda_vector_index(dim, 0);  // every search on the device
    std::mt19937_64 rng(static_cast<uint64_t>(dim));
    int64_t next_id = 100;
    std::vector<int64_t> live;
    auto check = [&](const std::string& phase) {
      ASSERT_EQ(gpu->size(), cpu.size()) << phase;
      const size_t n = cpu.size();
      for (size_t k : {size_t{1}, size_t{7}, size_t{256}, n, n + 3, size_t{1500}}) {
        const auto q = randn(static_cast<size_t>(dim), rng());
        expect_same(gpu->search(q, k), cpu.search(q, k),
                    fmt::format("vindex dim={} N={} k={}/{}", dim, n, k, phase));
      }
    };
    auto add = [&](size_t count) {
      std::vector<int64_t> ids;
      for (size_t i = 0; i < count; ++i) ids.push_back(next_id += 1 + static_cast<int64_t>(rng() % 3));
      const auto v = randn(count * static_cast<size_t>(dim), rng());
      cpu.add(ids, v);
      gpu->add(ids, v);
      live.insert(live.end(), ids.begin(), ids.end());
    };
    add(5);
    check("small");
    add(3000);  // grows the device matrix
    check("grown");
    // Replace some rows, remove others (the last row moves into each hole), add again.
    std::shuffle(live.begin(), live.end(), rng);
    std::vector<int64_t> changed(live.begin(), live.begin() + 200);
    const auto v = randn(changed.size() * static_cast<size_t>(dim), rng());
    cpu.replace(changed, v);
    gpu->replace(changed, v);
    for (size_t i = 200; i < 1400; ++i) {
      EXPECT_TRUE(gpu->remove(live[i]));
      cpu.remove(live[i]);
    }
    EXPECT_FALSE(gpu->remove(-5));
    live.erase(live.begin() + 200, live.begin() + 1400);
    check("edited");
    add(17);
    gpu->upsert(std::vector<int64_t>{live[0], next_id + 1}, randn(2 * static_cast<size_t>(dim), 7));
    cpu.upsert(std::vector<int64_t>{live[0], next_id + 1}, randn(2 * static_cast<size_t>(dim), 7));
    check("upserted");
    for (size_t i = 0; i < live.size(); ++i) ASSERT_TRUE(gpu->contains(live[i]));
    // Bad input is refused the same way as on the CPU.
    EXPECT_THROW(gpu->search(randn(static_cast<size_t>(dim) + 1, 1), 3), Error);
    EXPECT_THROW(gpu->add(std::vector<int64_t>{live[0]}, randn(static_cast<size_t>(dim), 1)), Error);
    gpu->clear();
    cpu.clear();
    EXPECT_TRUE(gpu->search(randn(static_cast<size_t>(dim), 2), 5).empty());
    add(9);
    check("after clear");
  }
}

TEST(CudaVectorIndex, ConcurrentSearchesAgree) {
  REQUIRE_GPU();
  const int32_t dim = 256;
  CpuVectorIndex cpu(dim);
  auto gpu = make_cuda_vector_index(dim, 0);
  std::vector<int64_t> ids(20000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 2 + 1;
  const auto v = randn(ids.size() * dim, 3);
  cpu.add(ids, v);
  gpu->add(ids, v);
  std::vector<std::vector<float>> queries;
  std::vector<std::vector<ScoredFact>> want;
  for (int q = 0; q < 8; ++q) {
    queries.push_back(randn(dim, 100 + q));
    want.push_back(cpu.search(queries.back(), 50));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 25; ++rep) {
        const size_t q = static_cast<size_t>(t + rep) % queries.size();
        const auto got = gpu->search(queries[q], 50);
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i].id != want[q][i].id && std::abs(got[i].score - want[q][i].score) > 1e-3) ++mismatches[t];
        if (got.size() != want[q].size()) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(CudaVectorIndex, SmallIndexesAreSearchedOnTheHost) {
  REQUIRE_GPU();
  // Below the threshold the host index answers: the same ranking and exactly its scores.
  const int32_t dim = 64;
  CpuVectorIndex cpu(dim);
  auto gpu = make_cuda_vector_index(dim);  // default threshold: 500 x 64 is far below it
  std::vector<int64_t> ids(500);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) + 1;
  const auto v = randn(ids.size() * dim, 5);
  cpu.add(ids, v);
  gpu->add(ids, v);
  const auto q = randn(dim, 6);
  EXPECT_EQ(gpu->search(q, 10), cpu.search(q, 10));
}
