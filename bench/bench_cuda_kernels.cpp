// Kernel benchmarks at Llama-3.1-8B shapes (32 layers, 8 kv heads, head_dim 128, GQA 4):
//   ceilings    device-to-device copy (bytes read + written) and an 8192^3 bf16 GEMM (cuBLASLt)
//   GEMMs       the forward's per-layer GEMMs at M = 1 .. 1532: cuBLASLt heuristic vs autotuned
//               (its top 8; its top 16 with split-K variants), and cuda::gemv at M <= 4
//               (--gemms: this table alone)
//   (c) injection kernel bandwidth vs the copy ceiling
//   (d) attention TFLOP/s: tensor-core prefill (causal, counted over unmasked pairs; bf16 and FP8 caches) and the
//       decode kernel's KV bandwidth
//   (e) retrieval: one query's wall-clock latency through the CPU VectorIndex (OpenBLAS sgemv +
//       partial sort, all cores) and the GPU one (upload query, score + top-k kernels, download)
//   (f) --shared-facts alone: attention when concurrent requests' shared facts are one physical copy
//   (g) --gemm-sweep alone: the layer GEMMs at every 8th M from 136 to 1024 (a mixed step's rows):
//       cuBLASLt's first heuristic against the fastest of its top 8 timed at each M
//   (h) --gemm-fp8 alone: the layer GEMMs with FP8 E4M3 weights (--quantization fp8) against bf16,
//       as the forward runs them: x quantized, then cuBLASLt's FP8 GEMM (W8A8), each timed
//   (i) --facts-in-place alone: the decode kernel over facts read in place from the memory pool
//       (keys rotated as read) against the same entries copied into each request's blocks
// Usage: bench_cuda_kernels [--quick] [--attention [SHAPE]] [--shared-facts] [--gemms] [--gemm-sweep] [--gemm-fp8]
//                           [--facts-in-place]
//   --attention: table (d) only; SHAPE: only that row (0-based), e.g. for one kernel under ncu.

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "memory/cuda/cuda_vector_index.h"
#include "backend/cuda/rope_table.h"
#include "model/config.h"
#include "cuda_bench_common.h"
#include "util/check.h"
#include "memory/retrieval/cpu_vector_index.h"

namespace inferscale {
namespace {

using bf16 = cuda::bf16;

DeviceBuffer random_bf16(int64_t n, uint64_t seed) {
  DeviceBuffer b(static_cast<size_t>(n) * 2);
  cuda::fill_random_bf16(b.as<bf16>(), n, seed, 0.0f, 1.0f, nullptr);
  return b;
}

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  CUDA_CHECK(cudaMemcpy(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

struct AttnBench {
  double ms, tflops, gbs;
};

// Block tables of S sequences that share physical blocks (the facts concurrent requests of one user
// both retrieved; run 23's experiment): `table` holds each sequence's ceil((ctx + q_len) / 16)
// block ids, back to back, over `num_blocks` physical blocks. The scores are not those of a real
// shared layout (that needs keys independent of their serving position); what is measured is the
// memory traffic of a kernel that walks requests when their tables alias.
struct SharedTables {
  std::vector<int32_t> table;
  int32_t num_blocks = 0;
};

// S sequences of `q_len` new tokens each after `ctx` cached entries, on `kernel` (a decode kernel
// needs q_len 1). min_split > 0
// overrides the planner's shortest split piece (a sweep of that setting).
// fp8: the cache in E4M3 codes with a scale per (slot, kv head) (its bytes counted as such).
// shared: the sequences' block tables (shared_tables below), instead of a private scattered block each.
// Facts read in place (section (i)): every sequence's entries [start, start + n) are pool slots
// slots[s * n ..], their keys rotated as the kernel reads them. n = 0 with a non-null range: the
// kernel's fact path with empty ranges (its per-lane steps alone).
struct InPlaceFacts {
  int32_t start = 0, n = 0;
  std::vector<int32_t> slots;  // [S * n]
  int64_t pool_slots = 0;
};

AttnBench bench_attention(int32_t S, int32_t ctx, int32_t q_len, int32_t D, int32_t NH, int32_t NKV, cuda::AttnKernel kernel,
                          int num_sms, int iters, int32_t min_split = 0, bool fp8 = false,
                          const SharedTables* shared = nullptr, const InPlaceFacts* facts = nullptr) {
  const int32_t bs = 16, group = NH / NKV;
  std::vector<int32_t> q_indptr{0}, kv_indptr{0}, kv_indices, positions;
  int32_t next = 0;
  double pairs = 0, kv_bytes = 0;
  for (int32_t s = 0; s < S; ++s) {
    for (int32_t i = 0; i < q_len; ++i) {
      positions.push_back(ctx + i);
      pairs += ctx + i + 1;
    }
    const int32_t len = ctx + q_len, nb = (len + bs - 1) / bs;
    kv_bytes += static_cast<double>(len) * NKV * (fp8 ? D + 4 : D * 2) * 2;
    for (int32_t b = 0; b < nb; ++b) kv_indices.push_back(next++);
    q_indptr.push_back(static_cast<int32_t>(positions.size()));
    kv_indptr.push_back(static_cast<int32_t>(kv_indices.size()));
  }
  if (shared != nullptr) {
    IS_CHECK(shared->table.size() == kv_indices.size(), "shared tables: {} entries for {}", shared->table.size(),
             kv_indices.size());
    kv_indices = shared->table;
    next = shared->num_blocks;
  } else {
    std::shuffle(kv_indices.begin(), kv_indices.end(), std::mt19937(1));  // scattered blocks
  }
  const int64_t T = static_cast<int64_t>(positions.size()), slots = static_cast<int64_t>(next) * bs;
  AttnPlanOptions po = cuda::attention_plan_options(kernel, q_len == 1, group, NKV, num_sms);
  if (min_split > 0) po.min_split_len = min_split;
  const AttnPlan plan = plan_attention(q_indptr.data(), S, positions.data(), nullptr, group, po);
  auto q = random_bf16(T * NH * D, 1), k = random_bf16(slots * NKV * D, 2), v = random_bf16(slots * NKV * D, 3);
  DeviceBuffer ks, vs;  // fp8: k and v hold codes (their first half), every code 0x30 (0.5), scales 0.01
  if (fp8) {
    CUDA_CHECK(cudaMemset(k.data(), 0x30, static_cast<size_t>(slots * NKV * D)));
    CUDA_CHECK(cudaMemset(v.data(), 0x30, static_cast<size_t>(slots * NKV * D)));
    ks.resize(static_cast<size_t>(slots * NKV) * 4);
    vs.resize(ks.bytes());
    cuda::fill_f32(ks.as<float>(), slots * NKV, 0.01f, nullptr);
    cuda::fill_f32(vs.as<float>(), slots * NKV, 0.01f, nullptr);
  }
  DeviceBuffer out(static_cast<size_t>(T * NH * D) * 2);
  auto d_pos = upload(positions), d_kvp = upload(kv_indptr), d_kvi = upload(kv_indices), d_items = upload(plan.items),
       d_merges = upload(plan.merges);
  const size_t np = static_cast<size_t>(std::max(plan.num_partials, 1));
  DeviceBuffer po_buf(np * NKV * plan.rows_per_tile * D * 4), pl_buf(np * NKV * plan.rows_per_tile * 4);
  cuda::AttentionArgs a;
  a.q = q.as<bf16>();
  a.cache.k = k.data();
  a.cache.v = v.data();
  a.cache.fp8 = fp8;
  a.cache.k_scale = ks.as<float>();
  a.cache.v_scale = vs.as<float>();
  a.out = out.as<bf16>();
  a.positions = d_pos.as<int32_t>();
  a.kv_indptr = d_kvp.as<int32_t>();
  a.kv_indices = d_kvi.as<int32_t>();
  a.items = d_items.as<AttnWorkItem>();
  a.merges = d_merges.as<AttnMergeItem>();
  a.partial_o = po_buf.as<float>();
  a.partial_lse = pl_buf.as<float>();
  a.num_items = static_cast<int32_t>(plan.items.size());
  a.num_merges = static_cast<int32_t>(plan.merges.size());
  a.rows_per_tile = plan.rows_per_tile;
  a.merge_rows = plan.max_merge_rows;
  a.num_heads = NH;
  a.num_kv_heads = NKV;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = 0.08838834764f;
  DeviceBuffer d_fact_indptr, d_fact_start, d_fact_slots, pool_k, pool_v;
  std::optional<RopeTable> rope;  // Llama 3's base, no scaling
  if (facts != nullptr) {
    ModelConfig rope_cfg;
    rope_cfg.head_dim = D;
    rope_cfg.rope_theta = 500000.0;
    rope.emplace(rope_cfg);
    std::vector<int32_t> indptr(static_cast<size_t>(S) + 1), start(static_cast<size_t>(S), facts->start);
    for (int32_t s = 0; s <= S; ++s) indptr[static_cast<size_t>(s)] = s * facts->n;
    d_fact_indptr = upload(indptr);
    d_fact_start = upload(start);
    d_fact_slots = upload(facts->slots);
    pool_k = random_bf16(std::max<int64_t>(facts->pool_slots, 1) * NKV * D, 4);
    pool_v = random_bf16(std::max<int64_t>(facts->pool_slots, 1) * NKV * D, 5);
    rope->ensure(ctx + q_len);
    a.fact_indptr = d_fact_indptr.as<int32_t>();
    a.fact_start = d_fact_start.as<int32_t>();
    a.fact_slots = d_fact_slots.as<int32_t>();
    a.pool.k = pool_k.data();
    a.pool.v = pool_v.data();
    a.cos_table = rope->cos();
    a.sin_table = rope->sin();
  }
  const double ms = bench::time_gpu_ms(nullptr, 3, iters, [&] { cuda::attention(a, kernel, nullptr); });
  const double flops = 4.0 * D * NH * pairs;  // QK^T and PV, 2 flops per multiply-add each
  return {ms, flops / ms / 1e9, kv_bytes / ms / 1e6};
}

// S sequences of `nb` blocks: the first fact_blocks * facts of each are `facts` facts of
// `fact_blocks` blocks drawn (without replacement, in random order) from their user's `pool` facts,
// the rest blocks of their own. Sequence s belongs to user s / (S / users) (grouped: a user's
// requests adjacent in the batch) or s % users (interleaved). Physical blocks are scattered.
SharedTables shared_tables(int32_t S, int32_t nb, int32_t users, int32_t pool, int32_t facts, int32_t fact_blocks,
                           bool grouped, double* distinct) {
  std::mt19937 g(7);
  std::map<std::pair<int32_t, int32_t>, int32_t> fact_first;  // (user, fact) -> its first logical block
  std::vector<int32_t> logical(static_cast<size_t>(S) * nb);
  int32_t next = 0;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t u = grouped ? s / std::max(1, S / users) : s % users;
    std::vector<int32_t> ids(static_cast<size_t>(pool));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    int32_t b = 0;
    for (int32_t f = 0; f < facts && b + fact_blocks <= nb; ++f) {
      auto [it, fresh] = fact_first.try_emplace({u, ids[static_cast<size_t>(f)]}, next);
      if (fresh) next += fact_blocks;
      for (int32_t j = 0; j < fact_blocks; ++j) logical[static_cast<size_t>(s) * nb + b++] = it->second + j;
    }
    for (; b < nb; ++b) logical[static_cast<size_t>(s) * nb + b] = next++;
  }
  std::vector<int32_t> perm(static_cast<size_t>(next));  // logical -> physical, scattered
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1));
  SharedTables t;
  t.num_blocks = next;
  t.table.reserve(logical.size());
  for (int32_t l : logical) t.table.push_back(perm[static_cast<size_t>(l)]);
  *distinct = static_cast<double>(next) / static_cast<double>(logical.size());
  return t;
}

// The smallest fact pool of a user that gives at least `target` distinct facts in a group of
// `per_user` requests, each retrieving `facts` of them uniformly (the expected union of the draws).
int32_t pool_for(double target, int32_t per_user, int32_t facts) {
  for (int32_t p = facts;; ++p) {
    const double miss = std::pow(1.0 - static_cast<double>(facts) / p, per_user);
    if (p * (1.0 - miss) / (static_cast<double>(facts) * per_user) >= target) return p;
  }
}

// Run 23: what a kernel that walks requests reads when the facts concurrent requests share are one
// physical copy (through L2), against today's copy per request; the decode step of 100 sequences
// over ~2,800 entries (43 facts of 4 blocks + 3 blocks of their own), and a burst's first forward
// (100 32-token questions). `bench_fact_sharing` measured the shares on LoCoMo with BM25 at k = 50:
// 0.54 distinct for groups of 10 questions of one user (the HTTP load's 100 clients over 10 users),
// 0.12 for one group of 100 (the in-process burst).
void shared_facts_section(int num_sms, int iters) {
  std::printf("\n(f) attention over facts shared by concurrent requests (one physical copy each; run 23)\n");
  std::printf("| kernel | cache | sequences x entries | users | order | distinct blocks | GPU ms | of distinct-per-request |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const int32_t S = 100, ctx = 2800, facts = 43, fb = 4;
  struct Case {
    int32_t q_len, users;
    double target;
    bool grouped;
  };
  const Case cases[] = {{1, 10, 0.54, true}, {1, 10, 0.54, false}, {1, 1, 0.12, true}, {1, 1, 0.01, true},
                        {32, 10, 0.54, true}, {32, 1, 0.12, true}};
  for (const bool fp8 : {false, true})
    for (const Case& c : cases) {
      const cuda::AttnKernel kernel = c.q_len == 1 ? cuda::AttnKernel::kDecodeMma : cuda::AttnKernel::kTiles;
      const int32_t q_ctx = c.q_len == 1 ? ctx : ctx - 50;
      const int32_t nb = (q_ctx + c.q_len + 15) / 16;
      const AttnBench base = bench_attention(S, q_ctx, c.q_len, 128, 32, 8, kernel, num_sms, iters, 0, fp8);
      double distinct = 1;
      const SharedTables t = shared_tables(S, nb, c.users, pool_for(c.target, S / c.users, facts), facts, fb, c.grouped,
                                           &distinct);
      const AttnBench r = bench_attention(S, q_ctx, c.q_len, 128, 32, 8, kernel, num_sms, iters, 0, fp8, &t);
      std::printf("| %s | %s | %d x %d | %d | %s | %.3f | %.3f | %.3f / %.3f = %.2f |\n",
                  c.q_len == 1 ? "decode (tensor-core decode kernel)" : "32-token questions (tiles)", fp8 ? "FP8" : "bf16",
                  S, q_ctx + c.q_len, c.users, c.grouped ? "grouped" : "interleaved", distinct, r.ms, r.ms, base.ms,
                  r.ms / base.ms);
    }
  // What a kernel that reads a shared fact once for two requests would pay for their second query
  // group: the decode kernel's 8 MMA columns hold one token's 4 q heads at GQA 4 (the other 4 are
  // zero); at GQA 8 all 8 are real, over the same KV bytes.
  std::printf("\n| decode kernel, 100 x 2,800, one layer | cache | GQA 4 (32 q / 8 kv heads) ms | GQA 8 (64 q / 8 kv) ms | ratio |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const bool fp8 : {false, true}) {
    const AttnBench g4 = bench_attention(S, ctx, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma, num_sms, iters, 0, fp8);
    const AttnBench g8 = bench_attention(S, ctx, 1, 128, 64, 8, cuda::AttnKernel::kDecodeMma, num_sms, iters, 0, fp8);
    std::printf("| tensor-core decode kernel | %s | %.3f | %.3f | %.2f |\n", fp8 ? "FP8" : "bf16", g4.ms, g8.ms, g8.ms / g4.ms);
  }
}

// (i) The decode step of 100 sequences over 2,800 entries, one layer, as zero-copy memory serves
// it: entries 14 .. 2,513 are 50 facts of 50 tokens, each in whole pool blocks of its own (4 blocks,
// the last one part-filled), drawn from `pool` facts per sequence group of `per_pool` (1: every
// sequence its own facts; 100: one user's 100 requests over its facts, conv-26 of the engine
// benchmark). Against: the same entries copied into each sequence's blocks (block steps), and the
// fact path with empty ranges (the per-lane steps alone, no pool and no rotation).
void facts_in_place_section(int num_sms, int iters) {
  std::printf("\n(i) decode attention over facts read in place from the pool, 100 x 2,800 entries, one layer, bf16\n");
  std::printf("| layout | GPU ms | KV GB/s (entries read) | vs copied |\n|---|---|---|---|\n");
  const int32_t S = 100, ctx = 2800, D = 128, NH = 32, NKV = 8, start = 14, F = 50, L = 50, bs = 16;
  const int32_t fact_blocks = (L + bs - 1) / bs;
  const cuda::AttnKernel kernel = cuda::AttnKernel::kDecodeMma;
  const AttnBench copied = bench_attention(S, ctx, 1, D, NH, NKV, kernel, num_sms, iters);
  std::printf("| facts copied into each request's blocks (block steps) | %.3f | %.0f | 1.00 |\n", copied.ms, copied.gbs);
  InPlaceFacts empty;
  empty.start = start;
  const AttnBench lanes = bench_attention(S, ctx, 1, D, NH, NKV, kernel, num_sms, iters, 0, false, nullptr, &empty);
  std::printf("| no facts, per-lane steps (the in-place path's addressing alone) | %.3f | %.0f | %.2f |\n", lanes.ms, lanes.gbs,
              lanes.ms / copied.ms);
  for (const int32_t per_pool : {1, 10, 100}) {
    const int32_t pool = per_pool == 1 ? F : 200;  // facts a group draws from
    const int32_t groups = S / per_pool;
    InPlaceFacts f;
    f.start = start;
    f.n = F * L;
    f.pool_slots = static_cast<int64_t>(groups) * pool * fact_blocks * bs;
    std::vector<int32_t> perm(static_cast<size_t>(groups) * pool);  // pool fact -> its first block, scattered
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
    std::mt19937 g(9);
    for (int32_t s = 0; s < S; ++s) {
      std::vector<int32_t> ids(static_cast<size_t>(pool));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), g);
      for (int32_t k = 0; k < F; ++k) {
        const int32_t first_block = perm[static_cast<size_t>((s / per_pool) * pool + ids[static_cast<size_t>(k)])] * fact_blocks;
        for (int32_t j = 0; j < L; ++j) f.slots.push_back(first_block * bs + j);
      }
    }
    const AttnBench r = bench_attention(S, ctx, 1, D, NH, NKV, kernel, num_sms, iters, 0, false, nullptr, &f);
    std::printf("| facts in place, %d sequences a pool of %d facts | %.3f | %.0f | %.2f |\n", per_pool, pool, r.ms, r.gbs,
                r.ms / copied.ms);
  }
}

// The forward's GEMMs at Llama-3.1-8B shapes, y[M, N] = x[M, K] w[N, K]^T: the four of a layer,
// then the LM head.
struct LayerGemm {
  const char* name;
  int64_t N, K;
  bool f32_out, acc;
};
constexpr LayerGemm kLayerGemms[] = {{"qkv", 6144, 4096, true, false},
                                     {"o_proj (+residual)", 4096, 4096, true, true},
                                     {"gate_up", 28672, 4096, false, false},
                                     {"down (+residual)", 4096, 14336, true, true},
                                     {"lm_head", 128256, 4096, true, false}};
constexpr size_t kLayerGemmsNoHead = 4;

// One GEMM's weights in 8 copies, so that they come from HBM as in a real forward (16 GB pass
// between two uses of one layer), with inputs and an output of up to `max_rows` rows.
struct GemmRing {
  static constexpr int kCopies = 8;
  const LayerGemm& gm;
  std::vector<DeviceBuffer> ws;
  DeviceBuffer x, y;
  GemmRing(const LayerGemm& g, int64_t max_rows)
      : gm(g), x(random_bf16(max_rows * g.K, 99)), y(static_cast<size_t>(max_rows * g.N) * 4) {
    for (int r = 0; r < kCopies; ++r) ws.push_back(random_bf16(g.N * g.K, 100 + r));
    CUDA_CHECK(cudaMemset(y.data(), 0, y.bytes()));
  }
  // GPU ms of one GEMM of M rows through `g`: the median over `iters` runs of the ring, a copy each.
  double ms(Gemm& g, int64_t M, int iters) {
    return bench::time_gpu_ms(nullptr, 2, iters, [&] {
             for (const DeviceBuffer& w : ws) {
               if (gm.f32_out) {
                 g.run(x.as<bf16>(), w.as<bf16>(), y.as<float>(), M, gm.N, gm.K, gm.acc, nullptr);
               } else {
                 g.run(x.as<bf16>(), w.as<bf16>(), y.as<bf16>(), M, gm.N, gm.K, nullptr);
               }
             }
           }) /
           kCopies;
  }
  std::string describe(Gemm& g, int64_t M) { return g.describe(x.data(), ws[0].data(), M, gm.N, gm.K, gm.f32_out, gm.acc, nullptr); }
};

// Per-layer GEMMs of the forward at serving sizes: cuBLASLt's first heuristic (Gemm's default
// above one row), the fastest of its top 8 timed at each M, the fastest of its top 16 and their
// split-K variants, and cuda::gemv for M <= 4. M: one token (decode at batch 1), 4, a 32- and a
// 52-token question alone (TTFT), 100 sequences' decode step, 128, a mixed step's ~450 rows, 1532.
void gemm_section(int iters) {
  std::printf("\nGEMMs at Llama-3.1-8B shapes (y[M, N] = x[M, K] w[N, K]^T, bf16 in, f32 accumulate)\n");
  std::printf("| GEMM | M | N | K | heuristic #0 us | autotuned us | + split-K us | gemv us (M <= 4) | best GB/s "
              "(weights) | best TFLOP/s | heuristic #0 | autotuned + split-K |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  Gemm g0, g1, g2, g3;  // cuBLASLt's first heuristic, autotuned, cuda::gemv, autotuned with split-K
  g0.set_gemv_max_rows(0);
  g1.set_gemv_max_rows(0);
  g1.set_autotune(true);
  g2.set_gemv_max_rows(cuda::kGemvMaxRows);
  g3.set_gemv_max_rows(0);
  g3.set_autotune(true, true);
  constexpr int64_t kRows[] = {1, 4, 32, 52, 100, 128, 300, 448, 500, 1532, 2048};
  for (const LayerGemm& gm : kLayerGemms) {
    const bool head = gm.N > 100000;  // lm_head: only sampled rows
    GemmRing ring(gm, head ? 128 : kRows[std::size(kRows) - 1]);
    for (int64_t M : kRows) {
      if (head && M > 128) continue;
      const double t0 = ring.ms(g0, M, iters), t1 = ring.ms(g1, M, iters), t3 = ring.ms(g3, M, iters);
      const bool skinny = M <= cuda::kGemvMaxRows;
      const double t2 = skinny ? ring.ms(g2, M, iters) : 0.0;
      const double best = skinny ? std::min({t0, t1, t2, t3}) : std::min({t0, t1, t3});
      char gemv_us[32] = "-";
      if (skinny) std::snprintf(gemv_us, sizeof gemv_us, "%.1f", t2 * 1e3);
      std::printf("| %s | %ld | %ld | %ld | %.1f | %.1f | %.1f | %s | %.0f | %.1f | %s | %s |\n", gm.name,
                  static_cast<long>(M), static_cast<long>(gm.N), static_cast<long>(gm.K), t0 * 1e3, t1 * 1e3, t3 * 1e3,
                  gemv_us, gm.N * gm.K * 2.0 / best / 1e6, 2.0 * M * gm.N * gm.K / best / 1e9,
                  ring.describe(g0, M).c_str(), ring.describe(g3, M).c_str());
      std::fflush(stdout);
    }
  }
}

// The layer GEMMs with E4M3 weights against bf16. bf16 as CudaForwardOps::linear runs it
// (cuda::gemv at M = 1, else cuBLASLt); FP8 as the forward runs it (W8A8 at every M): x quantized,
// then cuBLASLt's FP8 GEMM. The quantization takes one kernel where RMSNorm or the SiLU gave the row
// maxima (qkv, gate_up; down above one block's size) or x is small, and two (row maxima, codes)
// where not (o_proj); each is timed alone here,
// launch gaps included, while in a graphed forward it overlaps its neighbours (PDL). Rings of 8
// weight copies.
void gemm_fp8_section(int iters) {
  std::printf("\nLayer GEMMs, FP8 E4M3 weights against bf16 (ring of 8 weight copies, GPU us)\n");
  std::printf("| GEMM | M | bf16 | FP8 GEMM (cuBLASLt) | quantize x (its kernels) | FP8 GEMM / bf16 | (GEMM + quantize) / bf16 | "
              "FP8 weight GB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  constexpr int64_t kRows[] = {1, 2, 4, 8, 16, 32, 52, 100, 128, 448, 1532};
  for (size_t i = 0; i < kLayerGemmsNoHead; ++i) {
    const LayerGemm& gm = kLayerGemms[i];
    const int64_t max_rows = kRows[std::size(kRows) - 1];
    GemmRing ring(gm, max_rows);
    std::vector<DeviceBuffer> codes;
    // A scale per copy, each 256-byte aligned as the forward's are (a scale pointer at a 4-byte
    // offset made cuBLASLt's FP8 GEMM fail with CUBLAS_STATUS_NOT_SUPPORTED on the H100).
    constexpr int kScaleStride = 64;  // floats
    DeviceBuffer scales(GemmRing::kCopies * kScaleStride * 4), amax(static_cast<size_t>(std::max(gm.N, max_rows)) * 4),
        x_codes(static_cast<size_t>(max_rows * gm.K)), x_scale(4);
    for (int r = 0; r < GemmRing::kCopies; ++r) {
      codes.emplace_back(static_cast<size_t>(gm.N * gm.K));
      cuda::quantize_e4m3_tensor(ring.ws[r].as<bf16>(), gm.N, gm.K, amax.as<float>(), codes.back().as<uint8_t>(),
                                 scales.as<float>() + r * kScaleStride, nullptr);
    }
    Gemm bf, f8;
    for (int64_t M : kRows) {
      // qkv, gate_up: RMSNorm's row maxima; down: the SiLU's where one block would not quantize x.
      const bool one_block = cuda::quantize_e4m3_in_one_block(M, gm.K);
      const bool maxima_given = i == 0 || i == 2 || (i == 3 && !one_block);
      const double t_bf = 1e3 * ring.ms(bf, M, iters);
      // x's codes once (row maxima first), then the GEMM alone over the ring, then the quantization alone.
      cuda::quantize_e4m3_tensor(ring.x.as<bf16>(), M, gm.K, amax.as<float>(), x_codes.as<uint8_t>(), x_scale.as<float>(),
                                 nullptr);
      const double t_gemm = 1e3 * bench::time_gpu_ms(nullptr, 2, iters, [&] {
        for (int r = 0; r < GemmRing::kCopies; ++r)
          f8.run_e4m3(x_codes.as<uint8_t>(), x_scale.as<float>(), codes[r].as<uint8_t>(), scales.as<float>() + r * kScaleStride,
                      ring.y.data(), gm.f32_out, gm.acc, M, gm.N, gm.K, nullptr);
      }) / GemmRing::kCopies;
      const double t_q = 1e3 * bench::time_gpu_ms(nullptr, 2, iters, [&] {
        cuda::quantize_e4m3_tensor(ring.x.as<bf16>(), M, gm.K, amax.as<float>(), x_codes.as<uint8_t>(), x_scale.as<float>(),
                                   nullptr, maxima_given);
      });
      std::printf("| %s | %ld | %.1f | %.1f | %.1f (%d) | %.2fx | %.2fx | %.0f |\n", gm.name, static_cast<long>(M), t_bf, t_gemm,
                  t_q, maxima_given || one_block ? 1 : 2, t_gemm / t_bf, (t_gemm + t_q) / t_bf, gm.N * gm.K / t_gemm / 1e3);
      std::fflush(stdout);
    }
  }
}

// A sweep of the rows a mixed step's GEMMs take (136 to 1024 in steps of 8), per layer GEMM:
// cuBLASLt's first heuristic against the fastest of its top 8 timed at that M. Each M's times,
// then per GEMM the sums over the sweep.
void gemm_sweep_section(int iters) {
  std::printf("\nGEMM sweep over the rows of mixed steps (ring of 8 weight copies, us)\n");
  std::printf("| GEMM | M | heuristic #0 | timed at M |\n|---|---|---|---|\n");
  struct Sum {
    double h = 0, t = 0;
    int worse10 = 0;  // Ms where the heuristic is > 10% slower than the timed choice
  };
  std::vector<Sum> sums;
  for (size_t i = 0; i < kLayerGemmsNoHead; ++i) {
    const LayerGemm& gm = kLayerGemms[i];
    Gemm gh, gt;  // heuristic, timed at each M
    gt.set_autotune(true);
    GemmRing ring(gm, 1024);
    Sum sum;
    for (int64_t M = 136; M <= 1024; M += 8) {
      const double th = ring.ms(gh, M, iters) * 1e3, tt = ring.ms(gt, M, iters) * 1e3;
      std::printf("| %s | %ld | %.1f | %.1f |\n", gm.name, static_cast<long>(M), th, tt);
      sum.h += th;
      sum.t += tt;
      sum.worse10 += th > 1.1 * tt;
    }
    sums.push_back(sum);
    std::fflush(stdout);
  }
  std::printf("\n| GEMM | sum heuristic #0 | sum timed at M | timed / heuristic | Ms heuristic > 1.1x timed |\n");
  std::printf("|---|---|---|---|---|\n");
  for (size_t i = 0; i < sums.size(); ++i) {
    std::printf("| %s | %.0f | %.0f | %.3f | %d |\n", kLayerGemms[i].name, sums[i].h, sums[i].t, sums[i].t / sums[i].h,
                sums[i].worse10);
  }
}

}  // namespace
}  // namespace inferscale

int main(int argc, char** argv) {
  using namespace inferscale;
  bool quick = false, attention_only = false, shared_only = false, gemms_only = false, sweep_only = false, fp8_only = false,
       in_place_only = false;
  int only_shape = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--shared-facts") == 0) {
      shared_only = true;
    } else if (std::strcmp(argv[i], "--gemms") == 0) {
      gemms_only = true;
    } else if (std::strcmp(argv[i], "--gemm-sweep") == 0) {
      sweep_only = true;
    } else if (std::strcmp(argv[i], "--gemm-fp8") == 0) {
      fp8_only = true;
    } else if (std::strcmp(argv[i], "--facts-in-place") == 0) {
      in_place_only = true;
    } else if (std::strcmp(argv[i], "--attention") == 0) {
      attention_only = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') only_shape = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "bench_cuda_kernels: unknown argument '%s' (usage: [--quick] [--attention [SHAPE]] [--shared-facts] [--gemms] [--gemm-sweep] [--gemm-fp8] [--facts-in-place])\n", argv[i]);
      return 2;
    }
  }
  const int iters = quick ? 5 : 20;
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  std::printf("device: %s\n", bench::device_name().c_str());
  if (shared_only) {
    shared_facts_section(sms, iters);
    return 0;
  }
  if (gemms_only) {
    gemm_section(iters);
    return 0;
  }
  if (sweep_only) {
    gemm_sweep_section(quick ? 5 : 10);
    return 0;
  }
  if (fp8_only) {
    gemm_fp8_section(iters);
    return 0;
  }
  if (in_place_only) {
    facts_in_place_section(sms, iters);
    return 0;
  }

  if (!attention_only) {  // sections (a)-(c)
    // Ceilings.
    const bench::Ceilings ceil = bench::measure_ceilings(iters);
    const double copy_gbs = ceil.copy_gbs, gemm_tf = ceil.gemm_tflops;
    std::printf("\nceilings: D2D copy %.0f GB/s (read + write); bf16 GEMM 8192^3 %.0f TFLOP/s (cuBLASLt)\n", copy_gbs, gemm_tf);

    gemm_section(iters);

    // (c) Injection: all 32 layers in one launch, Llama-3.1-8B rows (8 kv heads x 128).
    std::printf("\n(c) injection kernel (gather pool -> rotate K -> scatter cache), 32 layers per launch\n");
    std::printf("| tokens | bytes moved | GPU us | GB/s | of copy ceiling |\n|---|---|---|---|---|\n");
    {
      const ModelConfig cfg = bench::llama31_8b();
      RopeTable table(cfg);
      table.ensure(16383);
      const int32_t L = 32, NKV = 8, D = 128;
      const int64_t row = NKV * D;
      for (int64_t N : {150l, 1500l, 8192l}) {
        const int64_t pool_slots = N + 64, cache_slots = 2 * N + 64;
        auto kp = random_bf16(L * pool_slots * row, 7), vp = random_bf16(L * pool_slots * row, 8);
        DeviceBuffer kc(static_cast<size_t>(L * cache_slots * row) * 2), vc(kc.bytes());
        std::vector<int64_t> src(static_cast<size_t>(N)), dst(static_cast<size_t>(N));
        std::vector<int32_t> pos(static_cast<size_t>(N));
        std::mt19937 g(9);
        std::iota(src.begin(), src.end(), 0);
        std::shuffle(src.begin(), src.end(), g);
        for (int64_t i = 0; i < N; ++i) {
          dst[static_cast<size_t>(i)] = 2 * i;  // every other slot: a request's blocks are not contiguous either
          pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
        }
        auto d_src = upload(src), d_dst = upload(dst), d_pos = upload(pos);
        cuda::InjectArgs a;
        a.pool.k = kp.data();
        a.pool.v = vp.data();
        a.cache.k = kc.data();
        a.cache.v = vc.data();
        a.pool_layer_stride = pool_slots * row;
        a.cache_layer_stride = cache_slots * row;
        a.src_slots = d_src.as<int64_t>();
        a.dst_slots = d_dst.as<int64_t>();
        a.positions = d_pos.as<int32_t>();
        a.cos_table = table.cos();
        a.sin_table = table.sin();
        a.N = N;
        a.num_layers = L;
        a.num_kv_heads = NKV;
        a.head_dim = D;
        const double ms = bench::time_gpu_ms(nullptr, 3, iters, [&] { cuda::inject(a, nullptr); });
        const double bytes = static_cast<double>(N) * L * row * 2 /*bf16*/ * 2 /*K,V*/ * 2 /*read+write*/;
        std::printf("| %ld | %.0f MB | %.1f | %.0f | %.0f%% |\n", static_cast<long>(N), bytes / 1e6, ms * 1e3,
                    bytes / ms / 1e6, 100.0 * bytes / ms / 1e6 / copy_gbs);
      }
    }

  }

  // (d) Attention.
  std::printf("\n(d) attention at Llama-3.1-8B heads (32 q / 8 kv, GQA 4), one layer\n");
  std::printf("| kernel | shape | GPU ms | TFLOP/s | KV GB/s |\n|---|---|---|---|---|\n");
  struct Shape {
    const char* label;
    int32_t S, ctx, q, D, NH, NKV;
    cuda::AttnKernel kernel;
    int32_t min_split = 0;  // 0: the planner's
    bool fp8 = false;       // an FP8 cache
  };
  const Shape shapes[] = {
      {"prefill (tensor cores)", 1, 0, 1532, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"prefill (tensor cores)", 4, 0, 2048, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"prefill (tensor cores)", 1, 0, 8192, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"prefill (tensor cores)", 4, 0, 2048, 64, 32, 8, cuda::AttnKernel::kTiles},
      {"question over injected facts", 1, 1500, 32, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"question over injected facts, pieces >= 128", 1, 1500, 32, 128, 32, 8, cuda::AttnKernel::kTiles, 128},
      {"question over injected facts, pieces >= 512", 1, 1500, 32, 128, 32, 8, cuda::AttnKernel::kTiles, 512},
      {"question over injected facts, pieces >= 1024", 1, 1500, 32, 128, 32, 8, cuda::AttnKernel::kTiles, 1024},
      {"decode, tensor-core tiles", 1, 1532, 1, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"decode, tensor-core tiles, pieces >= 64", 1, 1532, 1, 128, 32, 8, cuda::AttnKernel::kTiles, 64},
      {"decode, tensor-core tiles", 32, 1088, 1, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"decode, tensor-core tiles", 32, 4096, 1, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"decode, tensor-core tiles (100 users at k = 50)", 100, 2800, 1, 128, 32, 8, cuda::AttnKernel::kTiles},
      {"decode, tensor-core tiles, pieces >= 256", 1, 1532, 1, 128, 32, 8, cuda::AttnKernel::kTiles, 256},
      {"FP8 cache: prefill (tensor cores)", 1, 0, 1532, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"FP8 cache: prefill (tensor cores)", 1, 0, 8192, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"FP8 cache: question over injected facts", 1, 1500, 32, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"FP8 cache: decode, tensor-core tiles", 1, 1532, 1, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"FP8 cache: decode, tensor-core tiles", 32, 1088, 1, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"FP8 cache: decode, tensor-core tiles", 32, 4096, 1, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"FP8 cache: decode, tensor-core tiles (100 users at k = 50)", 100, 2800, 1, 128, 32, 8, cuda::AttnKernel::kTiles, 0, true},
      {"decode, tensor-core decode kernel", 1, 1532, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma},
      {"decode, tensor-core decode kernel", 32, 1088, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma},
      {"decode, tensor-core decode kernel", 32, 4096, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma},
      {"decode, tensor-core decode kernel (100 users at k = 50)", 100, 2800, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma},
      {"FP8 cache: decode, tensor-core decode kernel", 1, 1532, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma, 0, true},
      {"FP8 cache: decode, tensor-core decode kernel", 32, 1088, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma, 0, true},
      {"FP8 cache: decode, tensor-core decode kernel", 32, 4096, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma, 0, true},
      {"FP8 cache: decode, tensor-core decode kernel (100 users at k = 50)", 100, 2800, 1, 128, 32, 8, cuda::AttnKernel::kDecodeMma, 0, true},
      {"decode, tensor-core decode kernel", 4, 2048, 1, 64, 32, 8, cuda::AttnKernel::kDecodeMma},
      {"FP8 cache: decode, tensor-core decode kernel", 4, 2048, 1, 64, 32, 8, cuda::AttnKernel::kDecodeMma, 0, true},
      {"decode kernel, the bytes of 100 x 2,800 as 800 x 2,800 of one kv head", 800, 2800, 1, 128, 4, 1, cuda::AttnKernel::kDecodeMma},
      {"FP8 cache: decode kernel, the bytes of 100 x 2,800 as 800 x 2,800 of one kv head", 800, 2800, 1, 128, 4, 1, cuda::AttnKernel::kDecodeMma, 0, true},
  };
  const int num_shapes = static_cast<int>(sizeof(shapes) / sizeof(shapes[0]));
  if (only_shape >= num_shapes) {
    std::fprintf(stderr, "bench_cuda_kernels: --attention %d: there are %d shapes (0..%d)\n", only_shape, num_shapes,
                 num_shapes - 1);
    return 2;
  }
  for (int i = 0; i < num_shapes; ++i) {
    if (only_shape >= 0 && i != only_shape) continue;
    const Shape& s = shapes[i];
    const AttnBench r = bench_attention(s.S, s.ctx, s.q, s.D, s.NH, s.NKV, s.kernel, sms, iters, s.min_split, s.fp8);
    std::printf("| %s | S=%d ctx=%d q=%d D=%d | %.3f | %.1f | %.0f |\n", s.label, s.S, s.ctx, s.q, s.D, r.ms, r.tflops,
                r.gbs);
  }

  if (attention_only) return 0;

  // (e) Retrieval per query, wall clock including the host round trip (what a request waits).
  std::printf("\n(e) dense retrieval, one query, k = 50, f32 vectors: CPU index vs GPU index (median of %d)\n", 4 * iters);
  std::printf("| facts | dim | CPU us | GPU us | speedup |\n|---|---|---|---|---|\n");
  for (int64_t N : {1000l, 10000l, 100000l}) {
    for (int32_t dim : {384, 1024}) {
      std::mt19937 g(static_cast<uint32_t>(N + dim));
      std::normal_distribution<float> nd;
      std::vector<float> m(static_cast<size_t>(N) * dim), q(static_cast<size_t>(dim));
      for (float& x : m) x = nd(g);
      for (float& x : q) x = nd(g);
      std::vector<int64_t> ids(static_cast<size_t>(N));
      std::iota(ids.begin(), ids.end(), 1);
      CpuVectorIndex cpu(dim);
      cpu.add(ids, m);
      auto gpu = make_cuda_vector_index(dim, 0);  // always the device: the crossover is what this measures
      gpu->add(ids, m);
      auto median_us = [&](const VectorIndex& index) {
        std::vector<double> t;
        index.search(q, 50);  // warm-up (and the GPU's first upload)
        for (int i = 0; i < 4 * iters; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          const auto hits = index.search(q, 50);
          t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
          if (hits.size() != 50) std::printf("(wrong result size %zu)\n", hits.size());
        }
        std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
        return t[t.size() / 2];
      };
      const double c = median_us(cpu), gu = median_us(*gpu);
      std::printf("| %ld | %d | %.1f | %.1f | %.1fx |\n", static_cast<long>(N), dim, c, gu, c / gu);
    }
  }
  return 0;
}
