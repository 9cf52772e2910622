#include <gtest/gtest.h>

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
  EXPECT_LE(seen.size(), 5u);
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
