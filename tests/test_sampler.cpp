#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "engine/sampler.h"

using namespace inferscale;

TEST(Sampler, GreedyTakesFirstMaximum) {
  std::mt19937_64 rng(0);
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> l{0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(sample_token(l, p, rng), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(sample_token(l, p, rng), 1);
}

TEST(Sampler, SeedIsDeterministicAndTopKRestricts) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 11) * 0.3f;
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 5;
  std::mt19937_64 a(7), b(7);
  std::map<int, int> seen;
  for (int i = 0; i < 500; ++i) {
    const int32_t x = sample_token(l, p, a);
    EXPECT_EQ(x, sample_token(l, p, b));
    ++seen[x];
  }
  // top_k keeps the ids whose logit is at least the 5th largest (ties there all stay, as vLLM's).
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (const auto& [id, n] : seen) EXPECT_GE(l[static_cast<size_t>(id)], sorted[4]) << "id " << id;
  EXPECT_GE(seen.size(), 2u);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities ~ 0.7, 0.2, 0.1 (temperature 1): top_p 0.6 keeps only the first.
  std::vector<float> l{std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  SamplingParams p;
  p.top_p = 0.6f;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sample_token(l, p, rng), 0);
  p.top_p = 0.85f;
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[sample_token(l, p, rng)];
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[1], 300);  // 0.2 / 0.9 of the mass
}

#include "sampling_test_util.h"

// sample_row over stratified draws u = (i + 0.5) / N gives every id its probability's share of N
// within one count: the id-order inverse CDF, against the rule's probabilities computed by sorting.
TEST(Sampler, SampleRowFollowsTheRuleDistribution) {
  std::vector<float> l(41);
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (float& x : l) x = nd(g);
  l[3] = l[17] = l[30] = 20.0f;  // a tie at the top, at the top-k threshold for k = 2
  for (const RowSampling k : {RowSampling{0.8f, 0, 1.0f, 0}, RowSampling{1.2f, 9, 1.0f, 0}, RowSampling{1.0f, 2, 1.0f, 0},
                              RowSampling{1.0f, 0, 0.7f, 0}, RowSampling{0.6f, 20, 0.9f, 0}, RowSampling{3.0f, 0, 0.2f, 0},
                              RowSampling{0.8f, 40, 0.95f, 0, min_p_gap(0.8f, 0.05f)},  // llama.cpp's defaults
                              RowSampling{2.0f, 0, 1.0f, 0, min_p_gap(2.0f, 0.1f)}, RowSampling{1.0f, 9, 0.5f, 0, min_p_gap(1.0f, 0.3f)}}) {
    const std::vector<double> want = test::sampling_probabilities(l, k);
    const int N = 20000;
    std::vector<int> count(l.size(), 0);
    for (int i = 0; i < N; ++i) {
      RowSampling s = k;
      s.u = (static_cast<float>(i) + 0.5f) / N;
      ++count[static_cast<size_t>(sample_row(l.data(), static_cast<int64_t>(l.size()), s))];
    }
    for (size_t i = 0; i < l.size(); ++i) {
      EXPECT_LE(std::abs(count[i] - want[i] * N), 2.0) << "id " << i << " T " << k.temperature << " k " << k.top_k << " p " << k.top_p
                                                          << " min_gap " << k.min_gap;
      if (want[i] == 0.0) EXPECT_EQ(count[i], 0) << "id " << i << " is outside the kept set";
    }
  }
  // Ties at the k-th logit all stay: k = 2 over three equal maxima keeps all three, equally.
  const auto tied = test::sampling_probabilities(l, {1.0f, 2, 1.0f, 0});
  EXPECT_NEAR(tied[3], 1.0 / 3, 1e-12);
  EXPECT_NEAR(tied[30], 1.0 / 3, 1e-12);
}

// sample_token with a seeded rng: a chi-square test of 60,000 draws against the rule's
// probabilities (df <= 40; the 1e-6 critical value is below 100).
TEST(Sampler, SeededDrawsPassChiSquare) {
  std::vector<float> l(40);
  for (int i = 0; i < 40; ++i) l[static_cast<size_t>(i)] = std::sin(static_cast<float>(i) * 1.7f) * 2.0f;
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 25;
  p.top_p = 0.95f;
  const auto want = test::sampling_probabilities(l, {p.temperature, p.top_k, p.top_p, 0});
  std::mt19937_64 rng(11);
  const int N = 60000;
  std::vector<int> count(l.size(), 0);
  for (int i = 0; i < N; ++i) ++count[static_cast<size_t>(sample_token(l, p, rng))];
  double chi2 = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(count[i], 0);
      continue;
    }
    const double e = want[i] * N;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 100.0);
}

// min-p keeps the ids whose tempered probability is at least min_p times the largest: with
// probabilities 0.5, 0.3, 0.15, 0.05 (T = 1), min_p 0.2 keeps the first three, and at T = 2
// (probabilities ~ sqrt of those, renormalized) min_p 0.2 keeps all four.
TEST(Sampler, MinPKeepsIdsWithinAFactorOfTheLargest) {
  const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const auto p1 = test::sampling_probabilities(l, {1.0f, 0, 1.0f, 0, min_p_gap(1.0f, 0.2f)});
  EXPECT_GT(p1[2], 0.0);
  EXPECT_EQ(p1[3], 0.0);
  EXPECT_NEAR(p1[0], 0.5 / 0.95, 1e-6);
  const auto p2 = test::sampling_probabilities(l, {2.0f, 0, 1.0f, 0, min_p_gap(2.0f, 0.2f)});
  EXPECT_GT(p2[3], 0.0);
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;
  std::mt19937_64 rng(4);
  std::map<int, int> seen;
  for (int i = 0; i < 3000; ++i) ++seen[sample_token(l, p, rng)];
  EXPECT_EQ(seen.count(3), 0u);
  EXPECT_GT(seen[2], 300);  // 0.15 / 0.95 of the draws
  EXPECT_EQ(min_p_gap(1.0f, 0.0f), -INFINITY);
}

TEST(Sampler, DrawsAreInTheUnitInterval) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100000; ++i) {
    const float u = draw_uniform(rng);
    ASSERT_TRUE(u >= 0.0f && u < 1.0f);
  }
  RowSampling bad{1.0f, 0, 1.0f, 1.0f};
  EXPECT_ANY_THROW(check_row_sampling(bad));
}
