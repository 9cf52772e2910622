// Paged attention parity: the tensor-core tiles and the two decode kernels (CUDA cores, tensor cores) against
// cpu::paged_attention (f32 over the same bf16-rounded q and cache), at odd shapes: 1/7/17
// sequences (and 70,001: more work items than the grid's y dimension holds), new-token counts 1/15/16/17/1000, head_dim 64/128, GQA 1/4/7, block sizes 16 and 7,
// with and without split-KV, and positions that jump; the tensor-core kernels over an FP8 cache too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "../fp8_test_util.h"
#include "cuda_test_util.h"

namespace inferscale {
namespace {

using bf16 = cuda::bf16;
using test::download;
using test::poisoned;
using test::upload;

struct AttnCase {
  int32_t num_seqs, head_dim, num_heads, num_kv_heads, block_size;
  bool decode;      // every sequence has one new token; the decode kernel
  int32_t num_sms;  // planner's SM count: 132 (split when small) or 1 (never split)
  bool jumps;       // a sequence's new tokens skip a range of positions
  // Decode cases: the kernel (prefill cases run the tiles).
  cuda::AttnKernel decode_kernel = cuda::AttnKernel::kDecodeMma;
  bool kv_start = false;     // each sequence attends from entry ctx / 2 on (ForwardBatch::kv_start)
  bool fp8 = false;          // the cache in FP8 codes and scales (the tensor-core kernels)
  int32_t max_ctx = 0;       // cached entries a sequence draws below (0: 3,000 decode, 600 prefill)
};

// Every kernel that runs decode plans.
constexpr cuda::AttnKernel kDecodeKernels[] = {cuda::AttnKernel::kTiles, cuda::AttnKernel::kDecodeMma};

std::string case_name(const char* fam, const AttnCase& c) {
  return std::string(fam) + "/S" + std::to_string(c.num_seqs) + "/D" + std::to_string(c.head_dim) + "/g" +
         std::to_string(c.num_heads / c.num_kv_heads) + "/bs" + std::to_string(c.block_size) + "/sms" +
         std::to_string(c.num_sms) + (c.jumps ? "/jumps" : "") + (c.kv_start ? "/kv_start" : "") + (c.fp8 ? "/fp8" : "");
}

void run_case(const AttnCase& c, uint64_t seed) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  const int32_t lens[] = {1, 15, 16, 17, 1000};
  const int32_t D = c.head_dim, NH = c.num_heads, NKV = c.num_kv_heads, bs = c.block_size;
  const int32_t group = NH / NKV;
  // Per sequence: cached context length and new tokens. Prefill: the first sequence gets 1000 new
  // tokens (every case has a long causal tile), the others 1/15/16/17 (keeps the CPU reference fast).
  std::vector<int32_t> q_indptr{0}, kv_indptr{0}, kv_indices, positions, kv_start;
  int32_t next_block = 0;
  std::vector<int32_t> seq_blocks_total;
  for (int32_t s = 0; s < c.num_seqs; ++s) {
    const int32_t n_new = c.decode ? 1 : (s == 0 ? 1000 : lens[g() % 4]);
    const int32_t ctx = static_cast<int32_t>(g() % (c.max_ctx > 0 ? c.max_ctx : c.decode ? 3000 : 600));
    const int32_t gap = (c.jumps && n_new > 1) ? 37 : 0;
    kv_start.push_back(c.kv_start ? ctx / 2 : 0);
    for (int32_t i = 0; i < n_new; ++i) positions.push_back(ctx + i + (i >= n_new / 2 ? gap : 0));
    const int32_t kv_len = positions.back() + 1;
    const int32_t nblk = (kv_len + bs - 1) / bs;
    for (int32_t b = 0; b < nblk; ++b) kv_indices.push_back(next_block++);
    q_indptr.push_back(static_cast<int32_t>(positions.size()));
    kv_indptr.push_back(static_cast<int32_t>(kv_indices.size()));
  }
  // Scatter the blocks over a larger cache in random order.
  const int32_t num_blocks = next_block + 13;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g);
  for (int32_t& b : kv_indices) b = perm[static_cast<size_t>(b)];
  const int64_t T = static_cast<int64_t>(positions.size());
  const int64_t slots = static_cast<int64_t>(num_blocks) * bs;

  const auto q = test::round_bf16(test::randn(static_cast<size_t>(T * NH * D), seed + 1));
  // FP8: the reference reads the codes x scales the kernel reads (its twin: tensor/fp8.h rounding).
  const auto k_raw = test::round_bf16(test::randn(static_cast<size_t>(slots * NKV * D), seed + 2));
  const auto v_raw = test::round_bf16(test::randn(k_raw.size(), seed + 3));
  const test::Fp8Rows k8 = c.fp8 ? test::fp8_quantize(k_raw, D) : test::Fp8Rows{};
  const test::Fp8Rows v8 = c.fp8 ? test::fp8_quantize(v_raw, D) : test::Fp8Rows{};
  const auto kc = c.fp8 ? test::fp8_dequantize(k8.codes, k8.scales, D) : k_raw;
  const auto vc = c.fp8 ? test::fp8_dequantize(v8.codes, v8.scales, D) : v_raw;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  std::vector<float> ref(static_cast<size_t>(T * NH * D));
  cpu::PagedAttentionArgs pa{q.data(),          kc.data(), vc.data(), ref.data(), positions.data(), q_indptr.data(),
                             kv_indptr.data(),  kv_indices.data(), kv_start.data(), c.num_seqs, NH, NKV, D, bs, scale};
  cpu::paged_attention(pa);

  const cuda::AttnKernel kernel = c.decode ? c.decode_kernel : cuda::AttnKernel::kTiles;
  const AttnPlanOptions po = cuda::attention_plan_options(kernel, c.decode, group, NKV, c.num_sms);
  const AttnPlan plan = plan_attention(q_indptr.data(), c.num_seqs, positions.data(), kv_start.data(), group, po);

  auto d_q = upload(test::to_bf16(q));
  auto d_k = c.fp8 ? upload(k8.codes) : upload(test::to_bf16(kc)), d_v = c.fp8 ? upload(v8.codes) : upload(test::to_bf16(vc));
  auto d_ks = upload(c.fp8 ? k8.scales : std::vector<float>{}), d_vs = upload(c.fp8 ? v8.scales : std::vector<float>{});
  auto d_pos = upload(positions), d_kvp = upload(kv_indptr), d_kvi = upload(kv_indices);
  auto d_items = upload(plan.items), d_merges = upload(plan.merges);
  const size_t np = static_cast<size_t>(std::max(plan.num_partials, 1));
  auto d_po = poisoned(np * NKV * plan.rows_per_tile * D * 4), d_pl = poisoned(np * NKV * plan.rows_per_tile * 4);
  auto d_out = poisoned(ref.size() * 2);
  cuda::AttentionArgs a;
  a.q = d_q.as<bf16>();
  a.cache = {d_k.data(), d_v.data(), c.fp8 ? d_ks.as<float>() : nullptr, c.fp8 ? d_vs.as<float>() : nullptr, c.fp8};
  a.out = d_out.as<bf16>();
  a.positions = d_pos.as<int32_t>();
  a.kv_indptr = d_kvp.as<int32_t>();
  a.kv_indices = d_kvi.as<int32_t>();
  a.items = d_items.as<AttnWorkItem>();
  a.merges = d_merges.as<AttnMergeItem>();
  a.partial_o = d_po.as<float>();
  a.partial_lse = d_pl.as<float>();
  a.num_items = static_cast<int32_t>(plan.items.size());
  a.num_merges = static_cast<int32_t>(plan.merges.size());
  a.rows_per_tile = plan.rows_per_tile;
  a.merge_rows = plan.max_merge_rows;
  a.num_heads = NH;
  a.num_kv_heads = NKV;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = scale;
  cuda::attention(a, kernel, nullptr);
  const auto got = test::from_bf16(download<uint16_t>(d_out, ref.size()));
  const char* fam = kernel == cuda::AttnKernel::kTiles ? (c.decode ? "attn_decode_tc" : "attn_prefill") : "attn_decode_mma";
  test::record(case_name(fam, c) + "/splits" + std::to_string(plan.num_partials),
               test::compare(got, ref), 1e-2);
}

TEST(CudaAttention, PrefillOddShapes) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (int32_t D : {64, 128}) {
    for (auto [nh, nkv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{14, 2}}) {
      for (int32_t S : {1, 7, 17}) {
        for (int32_t bs : {16, 7}) {
          run_case({S, D, nh, nkv, bs, false, S == 1 ? 132 : 1, S == 7}, seed += 10);
        }
      }
    }
  }
}

TEST(CudaAttention, PrefillSplitKv) {
  REQUIRE_GPU();
  // One sequence, planned for a (pretend) 1000-SM GPU so that every tile's kv range is split;
  // the merge must recombine the pieces.
  run_case({1, 128, 32, 8, 16, false, 1000, false}, 900);
  run_case({1, 64, 8, 8, 7, false, 1000, true}, 910);
}

TEST(CudaAttention, KvStart) {
  REQUIRE_GPU();
  // Sequences that attend from entry ctx / 2 on (a fact encoded at its serving position). Decode
  // at block sizes 7 (each entry's slot looked up) and 16 / 32 (the decode kernel's block steps,
  // whose first step starts before kv_begin at a multiple of 16).
  uint64_t seed = 3000;
  for (int32_t sms : {1, 1000}) {
    run_case({7, 128, 32, 8, 16, false, sms, false, cuda::AttnKernel::kTiles, true}, seed += 10);
    for (int32_t bs : {7, 16, 32})
      for (const auto k : kDecodeKernels) run_case({7, 64, 8, 2, bs, true, sms, false, k, true}, seed += 10);
  }
}

// The tensor-core kernels over an FP8 cache (codes and a scale per slot and kv head, widened to
// f16) against the reference over the same codes x scales: prefill, split-KV, decode (tiles and
// the decode kernel, with and without kv_start), both head dims, GQA 1 / 4 / 7, block sizes 16, 7 and
// 32.
TEST(CudaAttention, Fp8Cache) {
  REQUIRE_GPU();
  uint64_t seed = 4000;
  for (int32_t D : {64, 128}) {
    for (auto [nh, nkv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{14, 2}}) {
      for (int32_t bs : {16, 7, 32}) {
        AttnCase prefill{7, D, nh, nkv, bs, false, 1, true};
        prefill.fp8 = true;
        run_case(prefill, seed += 10);
        AttnCase split{1, D, nh, nkv, bs, false, 1000, false};
        split.fp8 = true;
        run_case(split, seed += 10);
        for (const auto k : {cuda::AttnKernel::kTiles, cuda::AttnKernel::kDecodeMma}) {
          for (bool kv_start : {false, true}) {
            AttnCase decode{17, D, nh, nkv, bs, true, 132, false, k, kv_start};
            decode.fp8 = true;
            run_case(decode, seed += 10);
          }
        }
      }
    }
  }
}

// More work items than the grid's y dimension holds (65,535: work_item_grid spills into z): 70,001
// one-token sequences over a few entries each, on every decode kernel (the tiles run them as one
// tile a sequence), bf16 and FP8.
TEST(CudaAttention, MoreWorkItemsThanGridY) {
  REQUIRE_GPU();
  uint64_t seed = 5000;
  for (const auto k : kDecodeKernels) {
    for (bool fp8 : {false, true}) {
      AttnCase c{70001, 64, 4, 1, 16, true, 132, false, k};
      c.fp8 = fp8;
      c.max_ctx = 8;  // one block a sequence
      run_case(c, seed += 10);
    }
  }
}

TEST(CudaAttention, DecodeOddShapes) {
  REQUIRE_GPU();
  uint64_t seed = 2000;
  for (int32_t D : {64, 128}) {
    for (auto [nh, nkv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{14, 2}, std::pair{32, 4}}) {
      for (int32_t S : {1, 7, 17}) {
        for (int32_t bs : {16, 7}) {
          for (int32_t sms : {132, 1})
            for (const auto k : kDecodeKernels) run_case({S, D, nh, nkv, bs, true, sms, false, k}, seed += 10);
        }
      }
    }
  }
}

}  // namespace
}  // namespace inferscale

namespace inferscale {
namespace {

// cuda::attention_mass (the probe's weights) against cpu::attention_mass over the same bf16- (or
// FP8-) rounded q and cache, at odd shapes: GQA 3 and 4, block sizes 16 and 7, rows whose
// positions jump, kv_start > 0, a key range that starts inside a block, mass added to.
void run_mass_case(int32_t D, int32_t NH, int32_t NKV, int32_t bs, int32_t kv_start, bool fp8, uint64_t seed) {
  const std::vector<int32_t> positions{301, 302, 303, 340, 341, 342, 343};  // 304..339 skipped
  const int32_t rows = static_cast<int32_t>(positions.size()), L = positions.back() + 1, kb = 13, ke = 290;
  const int32_t nblocks = (L + bs - 1) / bs + 3;
  std::vector<int32_t> blocks(static_cast<size_t>(nblocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(static_cast<uint32_t>(seed)));
  const int64_t row = static_cast<int64_t>(NKV) * D, slots = static_cast<int64_t>(nblocks) * bs;
  const std::vector<float> q = test::round_bf16(test::randn(static_cast<size_t>(rows * NH * D), seed + 1, 1.5f));
  std::vector<float> k = test::randn(static_cast<size_t>(slots * row), seed + 2);
  const std::vector<float> v(k.size(), 0.0f);
  const std::vector<float> mass0 = test::randn(static_cast<size_t>(rows * (ke - kb)), seed + 3, 0.1f);
  cpu::AttentionMassArgs c;
  c.q = q.data();
  c.positions = positions.data();
  c.blocks = blocks.data();
  c.s.kv_start = kv_start;
  c.s.rows = rows;
  c.s.num_heads = NH;
  c.s.num_kv_heads = NKV;
  c.s.head_dim = D;
  c.s.block_size = bs;
  c.s.key_begin = kb;
  c.s.key_end = ke;
  c.s.scale = 1.0f / std::sqrt(static_cast<float>(D));
  cuda::AttentionMassArgs g;
  DeviceBuffer dq = upload(test::to_bf16(q)), dk, dscale, dpos = upload(positions), dblocks = upload(blocks);
  test::Fp8Rows f8;
  if (fp8) {
    f8 = test::fp8_quantize(k, D);
    k = test::fp8_dequantize(f8.codes, f8.scales, D);
    dk = upload(f8.codes);
    dscale = upload(f8.scales);
    c.cache = {k.data(), v.data()};
    g.cache.k = dk.data();
    g.cache.k_scale = dscale.as<float>();
    g.cache.fp8 = true;
  } else {
    k = test::round_bf16(k);
    dk = upload(test::to_bf16(k));
    c.cache = {k.data(), v.data()};
    g.cache.k = dk.data();
  }
  std::vector<float> want = mass0;
  cpu::attention_mass(c, want.data());
  g.q = dq.as<bf16>();
  g.positions = dpos.as<int32_t>();
  g.blocks = dblocks.as<int32_t>();
  g.s = c.s;
  DeviceBuffer dmass = upload(mass0);
  cuda::attention_mass(g, dmass.as<float>(), nullptr);
  const std::vector<float> got = download<float>(dmass, want.size());
  test::record("attention_mass/D" + std::to_string(D) + "/g" + std::to_string(NH / NKV) + "/bs" + std::to_string(bs) +
                   (fp8 ? "/fp8" : ""),
               test::compare(got, want), 2e-5);
}

TEST(CudaAttention, ProbeMassMatchesTheCpuTwin) {
  REQUIRE_GPU();
  run_mass_case(64, 9, 3, 16, 0, false, 9100);
  run_mass_case(128, 8, 2, 7, 5, false, 9200);
  run_mass_case(64, 9, 3, 7, 0, true, 9300);
  run_mass_case(128, 12, 3, 16, 11, true, 9400);
}

}  // namespace
}  // namespace inferscale
