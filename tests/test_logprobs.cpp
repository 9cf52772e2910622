// compute_logprobs (engine/logprobs.h) against a plain two-pass log-softmax in long double: values,
// rank, top-N order and ties, at odd row lengths (the blocked pass has 1,024-float blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/logprobs.h"
#include "logprobs_test_util.h"
#include "util/check.h"

using namespace inferscale;

namespace {

// Ids by logit descending, lower id first among equals.
std::vector<int32_t> ranked_ids(const std::vector<float>& row) {
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  return ids;
}

void expect_matches(const std::vector<float>& row, int32_t token, int32_t top_n) {
  const LogprobEntry e = compute_logprobs(row, token, top_n);
  const std::vector<double> ref = inferscale::testing::reference_log_softmax(row.data(), static_cast<int64_t>(row.size()));
  const std::vector<int32_t> ranked = ranked_ids(row);
  EXPECT_EQ(e.token, token);
  EXPECT_NEAR(e.logprob, ref[token], 1e-12) << "V " << row.size();
  EXPECT_EQ(e.rank, inferscale::testing::reference_rank(row.data(), static_cast<int64_t>(row.size()), token));
  const size_t want = std::min<size_t>(top_n, row.size());
  ASSERT_EQ(e.top.size(), want);
  for (size_t i = 0; i < want; ++i) {
    EXPECT_EQ(e.top[i].id, ranked[i]) << "top " << i << " of V " << row.size();
    EXPECT_NEAR(e.top[i].logprob, ref[ranked[i]], 1e-12);
  }
}

}  // namespace

TEST(Logprobs, MatchesLogSoftmaxAtOddLengths) {
  std::mt19937 rng(7);
  for (int64_t V : {1, 2, 7, 260, 1023, 1024, 1025, 3000, 49152, 128256}) {
    std::normal_distribution<float> nd(0.0f, 4.0f);
    std::vector<float> row(static_cast<size_t>(V));
    for (float& v : row) v = nd(rng);
    for (int32_t top_n : {0, 1, 5, 20}) expect_matches(row, static_cast<int32_t>(rng() % V), top_n);
    // The best token: rank 1, and the first of the top list.
    const int32_t best = ranked_ids(row)[0];
    const LogprobEntry e = compute_logprobs(row, best, 3);
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.top[0].id, best);
    EXPECT_EQ(e.top[0].logprob, e.logprob);
  }
}

TEST(Logprobs, LargeLogitsTiesAndAMaximumLateInTheRow) {
  // Logits of real models reach the hundreds; the maximum sits in the last block, so the running
  // sum is rescaled after two blocks.
  std::vector<float> row(2500);
  for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(i % 97) * 0.5f - 20.0f;
  row[2400] = 310.0f;
  row[17] = 300.0f;
  expect_matches(row, 17, 20);
  expect_matches(row, 2400, 4);
  // Equal logits: lower id first, in and across blocks; equal logits share a rank.
  std::vector<float> flat(3000, 1.0f);
  flat[2999] = 2.0f;
  flat[5] = 2.0f;
  const LogprobEntry e = compute_logprobs(flat, 2999, 4);
  ASSERT_EQ(e.top.size(), 4u);
  EXPECT_EQ(e.top[0].id, 5);
  EXPECT_EQ(e.top[1].id, 2999);
  EXPECT_EQ(e.top[2].id, 0);
  EXPECT_EQ(e.top[3].id, 1);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(compute_logprobs(flat, 7, 0).rank, 3);
  expect_matches(flat, 7, 20);
  // Very negative logits underflow to nothing and stay finite.
  std::vector<float> wide{0.0f, -800.0f, -1e6f, 5.0f};
  const LogprobEntry w = compute_logprobs(wide, 2, 2);
  EXPECT_TRUE(std::isfinite(w.logprob));
  EXPECT_NEAR(w.logprob, -1e6 - 5.0 - std::log1p(std::exp(-5.0)), 1e-9);
  expect_matches(wide, 1, 4);
}

TEST(Logprobs, TopNLargerThanTheRowAndBadArguments) {
  std::vector<float> row{0.5f, -1.0f, 2.0f};
  const LogprobEntry e = compute_logprobs(row, 1, 20);
  ASSERT_EQ(e.top.size(), 3u);
  EXPECT_EQ(e.top[0].id, 2);
  EXPECT_EQ(e.top[2].id, 1);
  EXPECT_EQ(e.rank, 3);
  EXPECT_THROW(compute_logprobs(row, 3, 0), Error);
  EXPECT_THROW(compute_logprobs(row, -1, 0), Error);
  EXPECT_THROW(compute_logprobs(row, 0, kMaxLogprobs + 1), Error);
  EXPECT_THROW(compute_logprobs({}, 0, 0), Error);
}
