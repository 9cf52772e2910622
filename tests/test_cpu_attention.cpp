// The CPU paged attention (GEMM panels per sequence and kv head) against a direct double-precision
// loop over the definition, on random inputs at odd shapes: several sequences, GQA ratios 1/4/7,
// positions that skip a range, kv_start > 0, odd block sizes, scattered block tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"

using namespace inferscale;

namespace {

struct Shape {
  std::vector<std::vector<int32_t>> positions;  // per sequence, increasing
  std::vector<int32_t> kv_start;
  int32_t num_heads, num_kv_heads, head_dim, block_size;
};

double check(const Shape& sh, uint32_t seed, ThreadPool* pool) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int32_t S = static_cast<int32_t>(sh.positions.size());
  const int64_t row = static_cast<int64_t>(sh.num_kv_heads) * sh.head_dim;
  // Block tables: each sequence gets enough blocks, shuffled across the cache.
  std::vector<int32_t> kv_indptr{0}, kv_indices, q_indptr{0}, positions;
  int32_t total_blocks = 0;
  for (const auto& p : sh.positions) total_blocks += p.back() / sh.block_size + 1;
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (const auto& p : sh.positions) {
    for (int32_t b = 0; b <= p.back() / sh.block_size; ++b) kv_indices.push_back(ids[next++]);
    kv_indptr.push_back(static_cast<int32_t>(kv_indices.size()));
    positions.insert(positions.end(), p.begin(), p.end());
    q_indptr.push_back(static_cast<int32_t>(positions.size()));
  }
  const int64_t T = static_cast<int64_t>(positions.size());
  std::vector<float> kc(static_cast<size_t>(total_blocks * sh.block_size * row)), vc(kc.size());
  for (auto& x : kc) x = nd(rng);
  for (auto& x : vc) x = nd(rng);
  std::vector<float> q(static_cast<size_t>(T * sh.num_heads * sh.head_dim)), out(q.size(), NAN);
  for (auto& x : q) x = nd(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  cpu::PagedAttentionArgs a{q.data(), kc.data(), vc.data(), out.data(), positions.data(), q_indptr.data(),
                            kv_indptr.data(), kv_indices.data(), sh.kv_start.empty() ? nullptr : sh.kv_start.data(), S,
                            sh.num_heads, sh.num_kv_heads, sh.head_dim, sh.block_size, scale};
  cpu::paged_attention(a, pool);
  double worst = 0;
  const int32_t group = sh.num_heads / sh.num_kv_heads;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t j0 = sh.kv_start.empty() ? 0 : sh.kv_start[static_cast<size_t>(s)];
    for (int32_t t = q_indptr[s]; t < q_indptr[s + 1]; ++t) {
      for (int32_t h = 0; h < sh.num_heads; ++h) {
        const float* qv = &q[static_cast<size_t>((t * sh.num_heads + h) * sh.head_dim)];
        std::vector<double> w;
        double mx = -1e300;
        for (int32_t j = j0; j <= positions[t]; ++j) {
          const int64_t slot = static_cast<int64_t>(kv_indices[kv_indptr[s] + j / sh.block_size]) * sh.block_size + j % sh.block_size;
          double d = 0;
          for (int32_t i = 0; i < sh.head_dim; ++i) d += double(qv[i]) * kc[slot * row + (h / group) * sh.head_dim + i];
          w.push_back(d * scale);
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int32_t i = 0; i < sh.head_dim; ++i) {
          double o = 0;
          for (int32_t j = j0; j <= positions[t]; ++j) {
            const int64_t slot = static_cast<int64_t>(kv_indices[kv_indptr[s] + j / sh.block_size]) * sh.block_size + j % sh.block_size;
            o += w[static_cast<size_t>(j - j0)] / sum * vc[slot * row + (h / group) * sh.head_dim + i];
          }
          const float got = out[static_cast<size_t>((t * sh.num_heads + h) * sh.head_dim + i)];
          EXPECT_FALSE(std::isnan(got));
          worst = std::max(worst, std::fabs(got - o));
        }
      }
    }
  }
  return worst;
}

std::vector<int32_t> range(int32_t a, int32_t b) {
  std::vector<int32_t> r;
  for (int32_t i = a; i < b; ++i) r.push_back(i);
  return r;
}

}  // namespace

TEST(CpuAttention, MatchesTheDefinitionAtOddShapes) {
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    // Prefill chunks, decodes, a chunk that skips an injected range, lengths 1/15/16/17/300.
    Shape prefill{{range(0, 17), {15}, range(3, 16), range(0, 300), {0}}, {}, 8, 2, 32, 16};
    EXPECT_LT(check(prefill, 1, p), 2e-5);
    std::vector<int32_t> skip = range(0, 5);
    for (int32_t i = 40; i < 47; ++i) skip.push_back(i);
    Shape gqa7{{skip, {99}, range(10, 27)}, {}, 7, 1, 64, 5};
    EXPECT_LT(check(gqa7, 2, p), 2e-5);
    Shape mha{{range(0, 33), range(0, 1)}, {}, 4, 4, 128, 16};
    EXPECT_LT(check(mha, 3, p), 2e-5);
    Shape shifted{{range(1000, 1023), range(7, 9)}, {1000, 7}, 8, 2, 64, 16};
    EXPECT_LT(check(shifted, 4, p), 2e-5);
  }
}

// cpu::attention_mass (the probe's weights, memory/compose/recompute.h) against paged_attention
// itself: with each entry's value the one-hot vector of its index (head_dim >= entries), a head's
// attention output is its weight vector, so the weights summed over heads are the mass. Odd
// shapes: GQA 3, block size 5, a chunk that skips a range, kv_start > 0, keys [7, 19).
TEST(CpuAttention, ProbeMassIsTheAttentionWeights) {
  const int32_t NH = 6, NKV = 2, D = 40, bs = 5;
  std::vector<int32_t> positions{2, 3, 4, 21, 22, 23, 29};  // one sequence: 5..20 skipped
  const int32_t kv_start = 2, T = static_cast<int32_t>(positions.size()), L = 30;
  std::vector<int32_t> blocks{5, 0, 3, 1, 4, 2};  // entries 0..29 over scattered blocks
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t row = static_cast<int64_t>(NKV) * D;
  std::vector<float> kc(static_cast<size_t>(6 * bs * row)), vc(kc.size(), 0.0f), q(static_cast<size_t>(T * NH * D));
  for (auto& x : kc) x = nd(rng);
  for (auto& x : q) x = 2.0f * nd(rng);
  for (int32_t j = 0; j < L; ++j)
    for (int32_t g = 0; g < NKV; ++g) {
      const int64_t slot = static_cast<int64_t>(blocks[j / bs]) * bs + j % bs;
      vc[static_cast<size_t>(slot * row + g * D + j)] = 1.0f;
    }
  std::vector<float> out(q.size(), NAN);
  const std::vector<int32_t> q_indptr{0, T}, kv_indptr{0, 6};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cpu::PagedAttentionArgs a{q.data(), kc.data(), vc.data(), out.data(), positions.data(), q_indptr.data(), kv_indptr.data(),
                            blocks.data(), &kv_start, 1, NH, NKV, D, bs, scale};
  cpu::paged_attention(a);
  // Rows from token 3 (position 21) on, keys [7, 19).
  const int32_t first = 3, kb = 7, ke = 19, rows = T - first;
  cpu::AttentionMassArgs m;
  m.q = q.data() + first * NH * D;
  m.cache = {kc.data(), vc.data()};
  m.positions = positions.data() + first;
  m.blocks = blocks.data();
  m.s.kv_start = kv_start;
  m.s.rows = rows;
  m.s.num_heads = NH;
  m.s.num_kv_heads = NKV;
  m.s.head_dim = D;
  m.s.block_size = bs;
  m.s.key_begin = kb;
  m.s.key_end = ke;
  m.s.scale = scale;
  std::vector<float> mass(static_cast<size_t>(rows * (ke - kb)), 0.5f);  // added to
  cpu::attention_mass(m, mass.data());
  double worst = 0, total = 0;
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t j = kb; j < ke; ++j) {
      double want = 0.5;
      for (int32_t h = 0; h < NH; ++h) want += out[static_cast<size_t>(((first + r) * NH + h) * D + j)];
      const double got = mass[static_cast<size_t>(r * (ke - kb) + j - kb)];
      worst = std::max(worst, std::fabs(got - want));
      total += got - 0.5;
    }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(total, 0.05);  // the range holds a real share of the weights
  EXPECT_LT(total, rows * NH);
}
