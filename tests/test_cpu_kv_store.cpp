// The CPU memory pool (backend/cpu/cpu_kv_store.h) in f32 and in FP8: rows read back exactly (f32) or
// as their per-head E4M3 codes times scales (FP8), rewriting what was read keeps it, and a backend
// with an FP8 pool captures, reads and injects exactly what an f32 pool does after that rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_kv_store.h"
#include "model/model.h"
#include "tensor/fp8.h"
#include "fp8_test_util.h"

using namespace inferscale;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

using test::fp8_rounded;  // each head's D values through E4M3 with their own scale

const Model& demo() {
  static const Model m = load_model("demo");
  return m;
}

// One prompt of n <= 32 seeded tokens at positions 0.. in cache blocks 0 and 1 (slot = position),
// its first `captured` tokens captured into pool slots first_pool_slot.. (returned in pool_slots),
// an output row for its last token.
ForwardBatch one_prompt(int32_t n, int32_t captured, int64_t first_pool_slot, uint32_t seed,
                        std::vector<int64_t>& pool_slots) {
  std::mt19937 g(seed);
  ForwardBatch fb;
  pool_slots.clear();
  for (int32_t i = 0; i < n; ++i) {
    fb.token_ids.push_back(static_cast<int32_t>(g() % 256));
    fb.positions.push_back(i);
    fb.slot_mapping.push_back(i);
    if (i < captured) {
      fb.capture_tokens.push_back(i);
      fb.capture_slots.push_back(first_pool_slot + i);
      pool_slots.push_back(first_pool_slot + i);
    }
  }
  fb.q_indptr = {0, n};
  fb.kv_indices = {0, 1};
  fb.kv_indptr = {0, 2};
  fb.output_tokens = {n - 1};
  return fb;
}

// The demo model on two CPU backends: all f32, and one with an FP8 pool and / or cache.
std::pair<std::unique_ptr<Backend>, std::unique_ptr<Backend>> demo_backends(bool pool_fp8, bool cache_fp8) {
  BackendOptions o;
  o.block_size = 16;
  o.num_cache_blocks = 16;
  o.num_pool_blocks = 4;
  o.num_threads = 1;
  auto f32 = make_cpu_backend(demo().config, demo().weights, o);
  o.pool_fp8 = pool_fp8;
  o.cache_fp8 = cache_fp8;
  return {std::move(f32), make_cpu_backend(demo().config, demo().weights, o)};
}

// A tensor's f32 values, all or [from, from + n).
std::vector<float> values(const HostTensor& t, int64_t from = 0, int64_t n = -1) {
  const float* p = t.as<float>();
  return std::vector<float>(p + from, p + (n < 0 ? t.numel() : from + n));
}

// Pool slots injected into cache slots first_dst.. at positions first_pos.., on both backends;
// the cache rows each then holds there (K, V of a, then of b).
struct InjectedRows {
  HostTensor ka, va, kb, vb;
};
InjectedRows inject_on_both(Backend& a, Backend& b, const std::vector<int64_t>& pool_slots, int64_t first_dst,
                            int32_t first_pos) {
  InjectBatch inj;
  for (size_t i = 0; i < pool_slots.size(); ++i) {
    inj.src_slots.push_back(pool_slots[i]);
    inj.dst_slots.push_back(first_dst + static_cast<int64_t>(i));
    inj.positions.push_back(first_pos + static_cast<int32_t>(i));
  }
  a.inject(inj);
  b.inject(inj);
  InjectedRows r;
  a.read_cache(inj.dst_slots, r.ka, r.va);
  b.read_cache(inj.dst_slots, r.kb, r.vb);
  return r;
}

}  // namespace

TEST(CpuKvStore, RowsReadBackAsStored) {
  const int64_t L = 2, slots = 40, H = 3, D = 24, row = H * D;
  for (const bool fp8 : {false, true}) {
    CpuKvStore pool(L, slots, H, D, fp8);
    const std::vector<int64_t> where{7, 0, 39, 12};
    const auto rows = randn(where.size() * static_cast<size_t>(row), fp8 ? 2 : 1, 3.0f);
    pool.write(1, 1, where.data(), 4, rows.data());
    std::vector<float> got(rows.size()), again(rows.size());
    pool.read(1, 1, where.data(), 4, got.data());
    EXPECT_EQ(got, fp8 ? fp8_rounded(rows, D) : rows);
    pool.write(1, 1, where.data(), 4, got.data());  // what was read, written again: unchanged
    pool.read(1, 1, where.data(), 4, again.data());
    EXPECT_EQ(again, got);
    std::vector<float> other(static_cast<size_t>(row), 1.0f);
    const int64_t untouched = 5;
    pool.read(0, 1, &untouched, 1, other.data());  // other layers and slots stay zero
    for (float v : other) EXPECT_EQ(v, 0.0f);
  }
  ModelConfig c;
  c.num_layers = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  EXPECT_EQ(kv_store_bytes_per_token(c, false, false), 2 * 32 * 8 * 128 * 4);
  EXPECT_EQ(kv_store_bytes_per_token(c, false, true), 2 * 32 * 8 * (128 + 4));  // 3.9x fewer bytes
  EXPECT_EQ(kv_store_bytes_per_token(c, true, false), 2 * 32 * 8 * 128 * 2);
}

TEST(CpuKvStore, AnFp8PoolCapturesAndInjectsWhatAnF32PoolDoesAfterRounding) {
  const ModelConfig& cfg = demo().config;
  auto [f32, fp8] = demo_backends(/*pool_fp8=*/true, /*cache_fp8=*/false);
  EXPECT_EQ(fp8->pool_dtype(), DType::kF32);  // what reads and writes move

  // A fact of 21 tokens encoded at positions 0.., its K/V captured into pool slots 3..23.
  std::vector<int64_t> pool_slots;
  const ForwardBatch fb = one_prompt(21, 21, 3, 5, pool_slots);
  std::vector<float> out_a, out_b;
  f32->forward(fb, out_a);
  fp8->forward(fb, out_b);
  EXPECT_EQ(out_a, out_b) << "the forward itself does not read the pool";
  HostTensor ka, va, kb, vb;
  f32->read_pool(pool_slots, ka, va);
  fp8->read_pool(pool_slots, kb, vb);
  const int64_t D = cfg.head_dim;
  EXPECT_EQ(values(kb), fp8_rounded(values(ka), D));
  EXPECT_EQ(values(vb), fp8_rounded(values(va), D));

  // Injected at other positions: the FP8 pool's cache rows are the f32 pool's once the f32 pool
  // holds the rounded rows.
  f32->write_pool(pool_slots, kb, vb);
  const InjectedRows c = inject_on_both(*f32, *fp8, pool_slots, 64, 100);
  EXPECT_EQ(values(c.ka), values(c.kb));
  EXPECT_EQ(values(c.va), values(c.vb));
}

// The FP8 KV cache (--kv-cache-dtype fp8) on the CPU, the twin of the GPU's: every row a forward
// or an injection writes reads back as the f32 cache's row through E4M3 (layer 0, whose inputs do
// not depend on the cache, exactly; later layers read rounded KV), attention reads those rows, and
// the logits stay near the f32 cache's. Its blocks take (D + 4) / (4 D) of the f32 bytes.
TEST(CpuKvStore, AnFp8CacheHoldsTheF32CachesRowsAfterRounding) {
  const ModelConfig& cfg = demo().config;
  auto [f32, fp8] = demo_backends(/*pool_fp8=*/false, /*cache_fp8=*/true);
  std::vector<int64_t> pool_slots;
  const ForwardBatch fb = one_prompt(30, 12, 0, 6, pool_slots);
  const std::vector<int64_t>& slots = fb.slot_mapping;  // the prompt's cache rows
  std::vector<float> la, lb;
  f32->forward(fb, la);
  fp8->forward(fb, lb);
  const int64_t D = cfg.head_dim, layer0 = static_cast<int64_t>(slots.size()) * cfg.kv_size();
  HostTensor ka, va, kb, vb;
  f32->read_cache(slots, ka, va);
  fp8->read_cache(slots, kb, vb);
  EXPECT_EQ(values(kb, 0, layer0), fp8_rounded(values(ka, 0, layer0), D));
  EXPECT_EQ(values(vb, 0, layer0), fp8_rounded(values(va, 0, layer0), D));
  const auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      den += static_cast<double>(a[i]) * a[i];
    }
    return std::sqrt(num / den);
  };
  const double logit_err = rel(la, lb);
  EXPECT_GT(logit_err, 0.0) << "the FP8 cache must round something";
  EXPECT_LT(logit_err, 0.1);
  // Every layer: each row is an E4M3 rounding of something (rounding it again changes nothing).
  EXPECT_EQ(values(kb), fp8_rounded(values(kb), D));
  EXPECT_EQ(values(vb), fp8_rounded(values(vb), D));

  // An injection writes the pool's rows, rotated, through the same rounding (the pool is f32 in
  // both; the fp8 backend's captured rows differ past layer 0, so compare layer 0).
  const InjectedRows inj = inject_on_both(*f32, *fp8, pool_slots, 100, 50);
  const int64_t inj0 = static_cast<int64_t>(pool_slots.size()) * cfg.kv_size();
  EXPECT_EQ(values(inj.kb, 0, inj0), fp8_rounded(values(inj.ka, 0, inj0), D));
  EXPECT_EQ(values(inj.vb, 0, inj0), fp8_rounded(values(inj.va, 0, inj0), D));

  ModelConfig c;
  c.num_layers = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  EXPECT_EQ(kv_store_bytes_per_token(c, true, true), 2 * 32 * 8 * (128 + 4));  // 0.52x of bf16
  EXPECT_EQ(kv_store_bytes_per_token(c, true, false), 2 * 32 * 8 * 128 * 2);
  EXPECT_EQ(kv_store_bytes_per_token(c, false, false), 2 * 32 * 8 * 128 * 4);
}
