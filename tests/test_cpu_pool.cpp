// The CPU memory pool (backend/cpu/cpu_pool.h) in f32 and in FP8: rows read back exactly (f32) or
// as their per-head E4M3 codes times scales (FP8), rewriting what was read keeps it, and a backend
// with an FP8 pool captures, reads and injects exactly what an f32 pool does after that rounding.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_pool.h"
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

}  // namespace

TEST(CpuPool, RowsReadBackAsStored) {
  const int64_t L = 2, slots = 40, H = 3, D = 24, row = H * D;
  for (const bool fp8 : {false, true}) {
    CpuPool pool(L, slots, H, D, fp8);
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
  EXPECT_EQ(pool_bytes_per_token(c, false, false), 2 * 32 * 8 * 128 * 4);
  EXPECT_EQ(pool_bytes_per_token(c, false, true), 2 * 32 * 8 * (128 + 4));  // 3.9x fewer bytes
  EXPECT_EQ(pool_bytes_per_token(c, true, false), 2 * 32 * 8 * 128 * 2);
}

TEST(CpuPool, AnFp8PoolCapturesAndInjectsWhatAnF32PoolDoesAfterRounding) {
  const ModelConfig& cfg = demo().config;
  BackendOptions o;
  o.block_size = 16;
  o.num_cache_blocks = 16;
  o.num_pool_blocks = 4;
  o.num_threads = 1;
  auto f32 = make_cpu_backend(cfg, demo().weights, o);
  o.pool_fp8 = true;
  auto fp8 = make_cpu_backend(cfg, demo().weights, o);
  EXPECT_EQ(fp8->pool_dtype(), DType::kF32);  // what reads and writes move

  // A fact of 21 tokens encoded at positions 0.., its K/V captured into pool slots 3..23.
  std::mt19937 g(5);
  ForwardBatch fb;
  std::vector<int64_t> pool_slots;
  for (int32_t i = 0; i < 21; ++i) {
    fb.token_ids.push_back(static_cast<int32_t>(g() % 256));
    fb.positions.push_back(i);
    fb.slot_mapping.push_back(i);
    fb.capture_tokens.push_back(i);
    fb.capture_slots.push_back(3 + i);
    pool_slots.push_back(3 + i);
  }
  fb.q_indptr = {0, 21};
  fb.kv_indices = {0, 1};
  fb.kv_indptr = {0, 2};
  fb.output_tokens = {20};
  std::vector<float> out_a, out_b;
  f32->forward(fb, out_a);
  fp8->forward(fb, out_b);
  EXPECT_EQ(out_a, out_b) << "the forward itself does not read the pool";
  HostTensor ka, va, kb, vb;
  f32->read_pool(pool_slots, ka, va);
  fp8->read_pool(pool_slots, kb, vb);
  const auto as_vec = [](const HostTensor& t) {
    return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
  };
  const int64_t D = cfg.head_dim;
  EXPECT_EQ(as_vec(kb), fp8_rounded(as_vec(ka), D));
  EXPECT_EQ(as_vec(vb), fp8_rounded(as_vec(va), D));

  // Injected at other positions: the FP8 pool's cache rows are the f32 pool's once the f32 pool
  // holds the rounded rows.
  f32->write_pool(pool_slots, kb, vb);
  InjectBatch inj;
  for (size_t i = 0; i < pool_slots.size(); ++i) {
    inj.src_slots.push_back(pool_slots[i]);
    inj.dst_slots.push_back(64 + static_cast<int64_t>(i));
    inj.positions.push_back(100 + static_cast<int32_t>(i));
  }
  f32->inject(inj);
  fp8->inject(inj);
  HostTensor ca, cva, cb, cvb;
  f32->read_cache(inj.dst_slots, ca, cva);
  fp8->read_cache(inj.dst_slots, cb, cvb);
  EXPECT_EQ(as_vec(ca), as_vec(cb));
  EXPECT_EQ(as_vec(cva), as_vec(cvb));
}
