// Parity of the element-wise, prologue, injection and retrieval kernels against their CPU twins
// at odd shapes. Outputs are poisoned (NaN) before each launch; every element must be written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_twins.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/resident_upload.h"
#include "backend/cuda/rope_table.h"
#include "../fp8_test_util.h"
#include "../sampling_test_util.h"
#include "cuda_test_util.h"
#include "model/forward_batch.h"
#include "model/rope.h"

namespace inferscale {
namespace {

using test::compare;
using test::download;
using test::poisoned;
using test::randn;
using test::record;
using test::round_bf16;
using test::to_bf16;
using test::upload;
using bf16 = cuda::bf16;

std::string name(const char* fam, std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s = fam;
  for (auto& [k, v] : kv) s += "/" + std::string(k) + std::to_string(v);
  return s;
}

ModelConfig rope_config(int64_t head_dim, bool interleaved, bool llama3) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_interleaved = interleaved;
  c.max_position_embeddings = 131072;
  c.rope_theta = llama3 ? 500000.0 : 10000.0;
  if (llama3) {
    c.rope_scaling.type = RopeType::kLlama3;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
  }
  return c;
}

// Device cos/sin table covering positions < n.
struct DevTable {
  DeviceBuffer cos, sin;
  DevTable(const Rope& rope, int64_t n) {
    std::vector<float> c(static_cast<size_t>(n * rope.head_dim() / 2)), s(c.size());
    RopeTable::build_host(rope, n, c.data(), s.data());
    cos = upload(c);
    sin = upload(s);
  }
};

TEST(CudaKernels, Embedding) {
  REQUIRE_GPU();
  for (int64_t H : {4096l, 100l, 16384l, 104l}) {
    for (int64_t T : {1l, 7l, 17l, 1000l}) {
      const int64_t V = 997;
      const auto emb = round_bf16(randn(static_cast<size_t>(V * H), 1));
      std::vector<int32_t> ids(static_cast<size_t>(T));
      std::mt19937 g(2);
      for (auto& i : ids) i = static_cast<int32_t>(g() % V);
      auto d_emb = upload(to_bf16(emb));
      auto d_ids = upload(ids);
      auto d_x = poisoned(static_cast<size_t>(T * H) * 4);
      cuda::embedding(d_emb.as<bf16>(), d_ids.as<int32_t>(), d_x.as<float>(), T, H, nullptr);
      std::vector<float> ref(static_cast<size_t>(T * H));
      cpu::embedding(emb.data(), ids.data(), ref.data(), T, H);
      record(name("embedding", {{"H", H}, {"T", T}}), compare(download<float>(d_x, ref.size()), ref), 1e-7);
    }
  }
}

TEST(CudaKernels, RmsNormWithRowGather) {
  REQUIRE_GPU();
  // 4096 and 100: the vector path, rows in registers; 20000: past them (re-read); 1027: scalar.
  for (int64_t H : {4096l, 100l, 20000l, 1027l}) {
    for (int64_t R : {1l, 7l, 17l, 1000l}) {
      const int64_t rows_in = R + 5;
      const auto x = randn(static_cast<size_t>(rows_in * H), 3, 2.0f);
      const auto w = round_bf16(randn(static_cast<size_t>(H), 4, 0.1f, 1.0f));
      std::vector<int32_t> rows(static_cast<size_t>(R));
      std::mt19937 g(5);
      for (auto& r : rows) r = static_cast<int32_t>(g() % rows_in);
      std::vector<float> gathered(static_cast<size_t>(R * H)), ref(gathered.size());
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(&gathered[static_cast<size_t>(r * H)], &x[static_cast<size_t>(rows[static_cast<size_t>(r)] * H)], H * 4);
      cpu::rmsnorm(gathered.data(), w.data(), ref.data(), R, H, 1e-5f);
      auto d_x = upload(x), d_w = upload(w), d_rows = upload(rows);
      auto d_f = poisoned(static_cast<size_t>(R * H) * 4);
      auto d_b = poisoned(static_cast<size_t>(R * H) * 2);
      cuda::rmsnorm(d_x.as<float>(), d_rows.as<int32_t>(), d_w.as<float>(), d_f.as<float>(), R, H, 1e-5f, nullptr);
      cuda::rmsnorm(d_x.as<float>(), d_rows.as<int32_t>(), d_w.as<float>(), d_b.as<bf16>(), R, H, 1e-5f, nullptr);
      record(name("rmsnorm_f32", {{"H", H}, {"R", R}}), compare(download<float>(d_f, ref.size()), ref), 1e-6);
      record(name("rmsnorm_bf16", {{"H", H}, {"R", R}}),
             compare(test::from_bf16(download<uint16_t>(d_b, ref.size())), ref), 5e-3);
    }
  }
}

TEST(CudaKernels, SiluMul) {
  REQUIRE_GPU();
  for (int64_t I : {14336l, 100l}) {
    for (int64_t T : {1l, 17l}) {
      const auto gu = round_bf16(randn(static_cast<size_t>(T * 2 * I), 6, 2.0f));
      std::vector<float> gate(static_cast<size_t>(T * I)), up(gate.size()), ref(gate.size());
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(&gate[static_cast<size_t>(t * I)], &gu[static_cast<size_t>(t * 2 * I)], I * 4);
        std::memcpy(&up[static_cast<size_t>(t * I)], &gu[static_cast<size_t>(t * 2 * I + I)], I * 4);
      }
      cpu::silu_mul(gate.data(), up.data(), ref.data(), T * I);
      auto d_gu = upload(to_bf16(gu));
      auto d_out = poisoned(static_cast<size_t>(T * I) * 2);
      cuda::silu_mul(d_gu.as<bf16>(), d_out.as<bf16>(), T, I, nullptr);
      record(name("silu_mul", {{"I", I}, {"T", T}}), compare(test::from_bf16(download<uint16_t>(d_out, ref.size())), ref),
             5e-3);
    }
  }
}

// The fused prologue at every feature combination, including capture and positions past 8192.
// A cache buffer's n values: bf16, or (fp8) codes x the scales of its D-value rows (poison: code
// 0xff and NaN scales, both NaN).
std::vector<float> cache_values(bool fp8, const DeviceBuffer& codes, const DeviceBuffer& scales, size_t n, int64_t D) {
  return fp8 ? test::fp8_dequantize(download<uint8_t>(codes, n), download<float>(scales, n / static_cast<size_t>(D)), D)
             : test::from_bf16(download<uint16_t>(codes, n));
}

TEST(CudaKernels, QkvRopeAppend) {
  REQUIRE_GPU();
  struct Heads {
    int32_t nh, nkv;
  };
  int case_id = 0;
  for (int64_t D : {64l, 128l}) {
    for (Heads hs : {Heads{4, 4}, Heads{8, 2}, Heads{14, 2}}) {
      for (int64_t T : {1l, 17l, 1000l}) {
        for (int feat = 0; feat < 4; ++feat) {  // bit 0: bias + qk-norm; bit 1: interleaved
          ++case_id;
          const bool norm = feat & 1, inter = feat & 2;
          const ModelConfig rc = rope_config(D, inter, true);
          const Rope rope(rc);
          const int64_t heads = hs.nh + 2 * hs.nkv, slots = T + 37, pool_slots = T + 11;
          const auto qkv = randn(static_cast<size_t>(T * heads * D), 10 + case_id);
          const auto bias = round_bf16(randn(static_cast<size_t>(heads * D), 11, 0.5f));
          const auto qn = round_bf16(randn(static_cast<size_t>(D), 12, 0.1f, 1.0f));
          const auto kn = round_bf16(randn(static_cast<size_t>(D), 13, 0.1f, 1.0f));
          std::mt19937 g(14 + case_id);
          std::vector<int32_t> pos(static_cast<size_t>(T));
          for (auto& p : pos) p = static_cast<int32_t>(g() % 20000);
          std::vector<int64_t> slot(static_cast<size_t>(slots)), cap(static_cast<size_t>(T), -1);
          std::iota(slot.begin(), slot.end(), 0);
          std::shuffle(slot.begin(), slot.end(), g);
          slot.resize(static_cast<size_t>(T));
          std::vector<int64_t> pslot(static_cast<size_t>(pool_slots));
          std::iota(pslot.begin(), pslot.end(), 0);
          std::shuffle(pslot.begin(), pslot.end(), g);
          for (int64_t t = 0; t < T; t += 2) cap[static_cast<size_t>(t)] = pslot[static_cast<size_t>(t)];  // every other token

          const int64_t row = hs.nkv * D;
          std::vector<float> rq(static_cast<size_t>(T * hs.nh * D)), rk(static_cast<size_t>(slots * row), NAN),
              rv(rk.size(), NAN), rkp(static_cast<size_t>(pool_slots * row), NAN), rvp(rkp.size(), NAN);
          cpu::QkvRopeAppendRef ref;
          ref.qkv = qkv.data();
          ref.bias = norm ? bias.data() : nullptr;
          ref.q_norm = norm ? qn.data() : nullptr;
          ref.k_norm = norm ? kn.data() : nullptr;
          ref.positions = pos.data();
          ref.slot_mapping = slot.data();
          ref.capture_slot = cap.data();
          ref.q_out = rq.data();
          ref.k_cache = rk.data();
          ref.v_cache = rv.data();
          ref.k_pool = rkp.data();
          ref.v_pool = rvp.data();
          ref.T = T;
          ref.num_heads = hs.nh;
          ref.num_kv_heads = hs.nkv;
          ref.head_dim = static_cast<int32_t>(D);
          ref.eps = 1e-6f;
          cpu::qkv_rope_append(ref, rope);

          DevTable tab(rope, 20000);
          auto d_qkv = upload(qkv), d_bias = upload(bias), d_qn = upload(qn), d_kn = upload(kn), d_pos = upload(pos),
               d_slot = upload(slot), d_cap = upload(cap);
          for (const bool fp8 : {false, true}) {  // cache and pool in bf16, then in FP8 codes and scales
          auto d_q = poisoned(rq.size() * 2), d_k = poisoned(rk.size() * (fp8 ? 1 : 2)),
               d_v = poisoned(rv.size() * (fp8 ? 1 : 2)), d_kp = poisoned(rkp.size() * (fp8 ? 1 : 2)),
               d_vp = poisoned(rvp.size() * (fp8 ? 1 : 2));
          auto d_ks = poisoned(static_cast<size_t>(slots * hs.nkv) * 4), d_vs = poisoned(static_cast<size_t>(slots * hs.nkv) * 4);
          auto d_kps = poisoned(static_cast<size_t>(pool_slots * hs.nkv) * 4),
               d_vps = poisoned(static_cast<size_t>(pool_slots * hs.nkv) * 4);
          cuda::QkvRopeAppendArgs a;
          a.qkv = d_qkv.as<float>();
          a.bias = norm ? d_bias.as<float>() : nullptr;
          a.q_norm = norm ? d_qn.as<float>() : nullptr;
          a.k_norm = norm ? d_kn.as<float>() : nullptr;
          a.cos_table = tab.cos.as<float>();
          a.sin_table = tab.sin.as<float>();
          a.positions = d_pos.as<int32_t>();
          a.slot_mapping = d_slot.as<int64_t>();
          a.capture_slot = d_cap.as<int64_t>();
          a.q_out = d_q.as<bf16>();
          a.cache = {d_k.data(), d_v.data(), fp8 ? d_ks.as<float>() : nullptr, fp8 ? d_vs.as<float>() : nullptr, fp8};
          a.pool = {d_kp.data(), d_vp.data(), fp8 ? d_kps.as<float>() : nullptr, fp8 ? d_vps.as<float>() : nullptr, fp8};
          a.T = T;
          a.num_heads = hs.nh;
          a.num_kv_heads = hs.nkv;
          a.head_dim = static_cast<int32_t>(D);
          a.eps = 1e-6f;
          a.interleaved = inter;
          cuda::qkv_rope_append(a, nullptr);

          // Compare only the slots the reference wrote; the rest must still hold the poison.
          auto pick = [&](const std::vector<float>& all, const std::vector<int64_t>& idx) {
            std::vector<float> o;
            for (int64_t s : idx)
              if (s >= 0) o.insert(o.end(), all.begin() + s * row, all.begin() + (s + 1) * row);
            return o;
          };
          const auto gk = cache_values(fp8, d_k, d_ks, rk.size(), D);
          const auto gv = cache_values(fp8, d_v, d_vs, rv.size(), D);
          const auto gkp = cache_values(fp8, d_kp, d_kps, rkp.size(), D);
          const auto gvp = cache_values(fp8, d_vp, d_vps, rvp.size(), D);
          size_t stray = 0;  // writes outside the expected slots
          for (size_t i = 0; i < gk.size(); ++i) stray += std::isnan(rk[i]) != std::isnan(gk[i]);
          for (size_t i = 0; i < gkp.size(); ++i) stray += std::isnan(rkp[i]) != std::isnan(gkp[i]);
          EXPECT_EQ(stray, 0u);
          const std::string n = name(fp8 ? "qkv_rope_append_fp8" : "qkv_rope_append",
                                     {{"D", D}, {"nh", hs.nh}, {"nkv", hs.nkv}, {"T", T}, {"feat", feat}});
          record(n + "/q", compare(test::from_bf16(download<uint16_t>(d_q, rq.size())), rq), 5e-3);
          // FP8: against the twin's rows through tensor/fp8.h; the f32 values the kernel rounds differ
          // from the twin's in the last bits (FMA), which flips the odd code to its neighbour (one
          // E4M3 step, up to 1/16 of the head's amax).
          const double tol = fp8 ? 2e-2 : 5e-3;
          const auto want_k = fp8 ? test::fp8_rounded(pick(rk, slot), D) : pick(rk, slot);
          const auto want_v = fp8 ? test::fp8_rounded(pick(rv, slot), D) : pick(rv, slot);
          record(n + "/k", compare(pick(gk, slot), want_k), tol);
          record(n + "/v", compare(pick(gv, slot), want_v), tol);
          const auto want_kp = fp8 ? test::fp8_rounded(pick(rkp, cap), D) : pick(rkp, cap);
          const auto want_vp = fp8 ? test::fp8_rounded(pick(rvp, cap), D) : pick(rvp, cap);
          record(n + "/k_pool", compare(pick(gkp, cap), want_kp), tol);
          record(n + "/v_pool", compare(pick(gvp, cap), want_vp), tol);
          }
        }
      }
    }
  }
}

TEST(CudaKernels, InjectAllLayers) {
  REQUIRE_GPU();
  int case_id = 0;
  for (int64_t D : {64l, 128l}) {
    for (int32_t nkv : {1, 8}) {
      for (int64_t N : {1l, 17l, 1000l}) {
        for (bool inter : {false, true}) {
          ++case_id;
          const Rope rope(rope_config(D, inter, true));
          const int32_t L = 3;
          const int64_t row = nkv * D, pool_slots = N + 9, cache_slots = N + 21;
          const auto kp = round_bf16(randn(static_cast<size_t>(L * pool_slots * row), 20 + case_id));
          const auto vp = round_bf16(randn(kp.size(), 21 + case_id));
          std::mt19937 g(22 + case_id);
          std::vector<int64_t> src(static_cast<size_t>(pool_slots)), dst(static_cast<size_t>(cache_slots));
          std::iota(src.begin(), src.end(), 0);
          std::iota(dst.begin(), dst.end(), 0);
          std::shuffle(src.begin(), src.end(), g);
          std::shuffle(dst.begin(), dst.end(), g);
          src.resize(static_cast<size_t>(N));
          dst.resize(static_cast<size_t>(N));
          std::vector<int32_t> pos(static_cast<size_t>(N));
          for (auto& p : pos) p = static_cast<int32_t>(g() % 100000);  // llama3 scaling, far past 8192
          DevTable tab(rope, 100000);
          auto d_src = upload(src), d_dst = upload(dst), d_pos = upload(pos);
          for (const bool pool_fp8 : {false, true}) {  // the pool in bf16, then the same rows as FP8 codes and scales
          // The twin reads an FP8 pool as its codes times their scales (tensor/fp8.h).
          const test::Fp8Rows qk = test::fp8_quantize(kp, D), qv = test::fp8_quantize(vp, D);
          const auto pk = pool_fp8 ? test::fp8_dequantize(qk.codes, qk.scales, D) : kp;
          const auto pv = pool_fp8 ? test::fp8_dequantize(qv.codes, qv.scales, D) : vp;
          std::vector<float> rk(static_cast<size_t>(L * cache_slots * row), NAN), rv(rk.size(), NAN);
          cpu::inject(pk.data(), pv.data(), rk.data(), rv.data(), pool_slots * row, cache_slots * row, src.data(),
                      dst.data(), pos.data(), N, L, nkv, rope);
          auto d_kp = pool_fp8 ? upload(qk.codes) : upload(to_bf16(kp)), d_vp = pool_fp8 ? upload(qv.codes) : upload(to_bf16(vp));
          auto d_kps = upload(qk.scales), d_vps = upload(qv.scales);
          for (const bool fp8 : {false, true}) {  // the cache in bf16, then in FP8 codes and scales
          auto d_k = poisoned(rk.size() * (fp8 ? 1 : 2)), d_v = poisoned(rv.size() * (fp8 ? 1 : 2));
          auto d_ks = poisoned(rk.size() / D * 4), d_vs = poisoned(rv.size() / D * 4);
          cuda::InjectArgs a;
          a.pool = {d_kp.data(), d_vp.data(), pool_fp8 ? d_kps.as<float>() : nullptr,
                    pool_fp8 ? d_vps.as<float>() : nullptr, pool_fp8};
          a.cache = {d_k.data(), d_v.data(), fp8 ? d_ks.as<float>() : nullptr, fp8 ? d_vs.as<float>() : nullptr, fp8};
          a.pool_layer_stride = pool_slots * row;
          a.cache_layer_stride = cache_slots * row;
          a.src_slots = d_src.as<int64_t>();
          a.dst_slots = d_dst.as<int64_t>();
          a.positions = d_pos.as<int32_t>();
          a.cos_table = tab.cos.as<float>();
          a.sin_table = tab.sin.as<float>();
          a.N = N;
          a.num_layers = L;
          a.num_kv_heads = nkv;
          a.head_dim = static_cast<int32_t>(D);
          a.interleaved = inter;
          cuda::inject(a, nullptr);
          const auto gk = cache_values(fp8, d_k, d_ks, rk.size(), D);
          const auto gv = cache_values(fp8, d_v, d_vs, rv.size(), D);
          std::vector<float> ek, eg, vk, vg;  // written slots only; the others must stay poisoned
          size_t stray = 0;
          for (size_t i = 0; i < rk.size(); ++i) {
            if (std::isnan(rk[i])) {
              stray += !std::isnan(gk[i]) + !std::isnan(gv[i]);
              continue;
            }
            ek.push_back(rk[i]);
            eg.push_back(gk[i]);
            vk.push_back(rv[i]);
            vg.push_back(gv[i]);
          }
          EXPECT_EQ(stray, 0u);
          const char* what = pool_fp8 ? (fp8 ? "inject_fp8pool_fp8" : "inject_fp8pool") : (fp8 ? "inject_fp8" : "inject");
          const std::string n = name(what, {{"D", D}, {"nkv", nkv}, {"N", N}, {"inter", inter}});
          // FP8 cache: against the twin's rows through tensor/fp8.h. V is quantized from the same
          // values with the same f32 operations: exact. K's rotation (FMA) can flip the odd code (as
          // above). A bf16 cache: V a copy (exact) from a bf16 pool, bf16's rounding of the twin's
          // values from an FP8 one.
          record(n + "/k", compare(eg, fp8 ? test::fp8_rounded(ek, D) : ek), fp8 ? 2e-2 : 4e-3);
          record(n + "/v", compare(vg, fp8 ? test::fp8_rounded(vk, D) : vk), !fp8 && pool_fp8 ? 4e-3 : 0.0);
          }
          }
        }
      }
    }
  }
}

TEST(CudaKernels, CopyRowsGatherScatter) {
  REQUIRE_GPU();
  const int32_t L = 3;
  const int64_t row = 8 * 128, slots = 300, n = 77;
  const auto src = round_bf16(randn(static_cast<size_t>(L * slots * row), 30));
  std::vector<int64_t> idx(static_cast<size_t>(slots));
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), std::mt19937(31));
  idx.resize(static_cast<size_t>(n));
  auto d_src = upload(to_bf16(src)), d_idx = upload(idx);
  auto d_packed = poisoned(static_cast<size_t>(L * n * row) * 2);
  cuda::copy_rows(d_src.data(), d_packed.data(), d_idx.as<int64_t>(), n, row * 2, L, slots * row * 2, n * row * 2,
                  false, nullptr);
  std::vector<float> ref(static_cast<size_t>(L * n * row));
  for (int32_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(&ref[static_cast<size_t>((l * n + i) * row)], &src[static_cast<size_t>((l * slots + idx[i]) * row)], row * 4);
  record("copy_rows/gather", compare(test::from_bf16(download<uint16_t>(d_packed, ref.size())), ref), 0.0);
  auto d_back = poisoned(static_cast<size_t>(L * slots * row) * 2);
  cuda::copy_rows(d_packed.data(), d_back.data(), d_idx.as<int64_t>(), n, row * 2, L, n * row * 2, slots * row * 2,
                  true, nullptr);
  const auto back = test::from_bf16(download<uint16_t>(d_back, static_cast<size_t>(L * slots * row)));
  std::vector<float> got2, ref2;
  for (int32_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < row; ++e) {
        got2.push_back(back[static_cast<size_t>((l * slots + idx[i]) * row + e)]);
        ref2.push_back(src[static_cast<size_t>((l * slots + idx[i]) * row + e)]);
      }
  record("copy_rows/scatter", compare(got2, ref2), 0.0);

  // Rows of 12 bytes (a slot's f32 scales at 3 kv heads): the 4-byte path, gather and scatter.
  const int64_t srow = 3;
  const auto sc = randn(static_cast<size_t>(L * slots * srow), 32);
  auto d_sc = upload(sc);
  auto d_sp = poisoned(static_cast<size_t>(L * n * srow) * 4);
  cuda::copy_rows(d_sc.data(), d_sp.data(), d_idx.as<int64_t>(), n, srow * 4, L, slots * srow * 4, n * srow * 4, false,
                  nullptr);
  const auto packed = download<float>(d_sp, static_cast<size_t>(L * n * srow));
  std::vector<float> sref;
  for (int32_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < srow; ++e) sref.push_back(sc[static_cast<size_t>((l * slots + idx[i]) * srow + e)]);
  record("copy_rows/gather_4byte", compare(packed, sref), 0.0);
  auto d_sb = upload(std::vector<float>(sc.size(), 0.0f));
  cuda::copy_rows(d_sp.data(), d_sb.data(), d_idx.as<int64_t>(), n, srow * 4, L, n * srow * 4, slots * srow * 4, true,
                  nullptr);
  const auto sback = download<float>(d_sb, sc.size());
  std::vector<float> sgot;
  for (int32_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < srow; ++e) sgot.push_back(sback[static_cast<size_t>((l * slots + idx[i]) * srow + e)]);
  record("copy_rows/scatter_4byte", compare(sgot, sref), 0.0);
}

// Ids from a kernel equal its twin's, every one; the count goes into the parity summary.
void expect_ids(const std::string& what, const std::vector<int32_t>& got, const std::vector<int32_t>& ref) {
  EXPECT_EQ(got, ref) << what;
  int equal = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) equal += got[i] == ref[i];
  test::note(what, std::to_string(equal) + "/" + std::to_string(ref.size()) + " ids equal");
}

// A linear layer's parity case: bf16 operands x [M, K] and w [N, K], a y0 to accumulate into, and
// x w^T in double from the same bf16 values.
struct LinearCase {
  int64_t M, N, K;
  std::vector<float> y0, ref;
  DeviceBuffer x, w;
  LinearCase(int64_t m, int64_t n, int64_t k, uint64_t x_seed, uint64_t w_seed, uint64_t y_seed) : M(m), N(n), K(k) {
    const std::vector<float> xh = round_bf16(randn(static_cast<size_t>(M * K), x_seed));
    const std::vector<float> wh = round_bf16(randn(static_cast<size_t>(N * K), w_seed, 0.05f));
    y0 = randn(static_cast<size_t>(M * N), y_seed);
    ref = test::matmul_nt_ref(xh, wh, M, N, K);
    x = upload(test::to_bf16(xh));
    w = upload(test::to_bf16(wh));
  }
  // The three outputs of run (test::check_linear_outputs) against ref.
  template <class Run>
  void check(const std::string& tag, Run run) const {
    test::check_linear_outputs(tag, ref, y0, run);
  }
};

// The skinny-M linear layer (cuda::gemv) against the same product in double from the same bf16
// operands: f32 out with and without accumulation, bf16 out; odd N, K down to one 16-byte chunk
// and long rows past the unrolled loop; M 1..4. Through Gemm (the forward's entry) too.
TEST(CudaKernels, GemvMatchesReference) {
  REQUIRE_GPU();
  struct Shape {
    int64_t N, K;
  };
  const Shape shapes[] = {{1, 8}, {37, 136}, {1000, 4096}, {4099, 1032}, {129, 14336}};
  Gemm via_gemm;
  via_gemm.set_gemv_max_rows(cuda::kGemvMaxRows);
  for (const Shape& sh : shapes) {
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      const LinearCase c(M, sh.N, sh.K, 300 + M, 400 + sh.N, 500);
      const std::string tag = "gemv/M" + std::to_string(M) + "_N" + std::to_string(sh.N) + "_K" + std::to_string(sh.K);
      c.check(tag, [&](DeviceBuffer& y, bool f32, bool acc, const std::string&) {
        cuda::gemv(c.x.as<bf16>(), c.w.as<bf16>(), y.data(), f32, acc, M, sh.N, sh.K, nullptr);
      });
      DeviceBuffer y = poisoned(static_cast<size_t>(M * sh.N) * 4);  // Gemm::run's path for M <= its gemv rows
      via_gemm.run(c.x.as<bf16>(), c.w.as<bf16>(), y.as<float>(), M, sh.N, sh.K, false, nullptr);
      record(tag + "/via_gemm", compare(download<float>(y, c.ref.size()), c.ref), 1e-5);
    }
  }
}

// Gemm's three outputs against the reference; each case notes the algorithm that ran.
void check_gemm(Gemm& g, const std::string& tag, int64_t M, int64_t N, int64_t K) {
  const LinearCase c(M, N, K, 600 + M, 700 + N, 800);
  c.check(tag + "/M" + std::to_string(M) + "_N" + std::to_string(N) + "_K" + std::to_string(K),
          [&](DeviceBuffer& y, bool f32, bool acc, const std::string& what) {
            if (f32) {
              g.run(c.x.as<bf16>(), c.w.as<bf16>(), y.as<float>(), M, N, K, acc, nullptr);
            } else {
              g.run(c.x.as<bf16>(), c.w.as<bf16>(), y.as<bf16>(), M, N, K, nullptr);
            }
            test::note(what, g.describe(c.x.data(), c.w.data(), M, N, K, f32, acc, nullptr));
          });
}

// cuBLASLt through Gemm with K split (forced 2, 3 and 4 ways, and autotuned over split-K
// candidates): odd M and N.
TEST(CudaKernels, GemmSplitKMatchesReference) {
  REQUIRE_GPU();
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{5, 129, 1032}, {33, 1000, 4096}, {100, 517, 2048}};
  for (const Shape& sh : shapes) {
    for (int splits : {2, 3, 4, -1}) {  // -1: autotuned with split-K candidates
      Gemm g;
      g.set_gemv_max_rows(0);
      if (splits > 0) g.set_split_k(splits);
      g.set_autotune(splits < 0, true);
      check_gemm(g, splits > 0 ? "gemm_split" + std::to_string(splits) : std::string("gemm_split_tuned"), sh.M, sh.N,
                 sh.K);
    }
  }
}

// The fused gate_up GEMV + SiLU * up against the double reference of the unfused pair, at odd
// shapes (an I that fills no block, a K with a tail past the batched loop) and every M.
TEST(CudaKernels, GemvSiluMulMatchesReference) {
  REQUIRE_GPU();
  struct Shape {
    int64_t I, K;
  };
  const Shape shapes[] = {{1, 8}, {37, 136}, {1001, 4096}, {14336, 4096}, {130, 1032}};
  for (const Shape& sh : shapes) {
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      const std::vector<float> xh = round_bf16(randn(static_cast<size_t>(M * sh.K), 600 + M));
      const std::vector<float> wh = round_bf16(randn(static_cast<size_t>(2 * sh.I * sh.K), 700 + sh.I, 0.05f));
      std::vector<float> ref(static_cast<size_t>(M * sh.I));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < sh.I; ++i) {
          double g = 0, u = 0;
          for (int64_t k = 0; k < sh.K; ++k) {
            const double xv = xh[static_cast<size_t>(m * sh.K + k)];
            g += xv * wh[static_cast<size_t>(i * sh.K + k)];
            u += xv * wh[static_cast<size_t>((sh.I + i) * sh.K + k)];
          }
          ref[static_cast<size_t>(m * sh.I + i)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        }
      DeviceBuffer x = upload(test::to_bf16(xh)), w = upload(test::to_bf16(wh));
      DeviceBuffer y = poisoned(static_cast<size_t>(M * sh.I) * 2);
      cuda::gemv_silu_mul(x.as<bf16>(), w.as<bf16>(), y.as<bf16>(), M, sh.I, sh.K, nullptr);
      record("gemv_silu_mul/M" + std::to_string(M) + "_I" + std::to_string(sh.I) + "_K" + std::to_string(sh.K),
             compare(test::from_bf16(download<uint16_t>(y, ref.size())), ref), 4e-3);
    }
  }
}

// Fed tokens: the device's feed against the CPU twin (feed_tokens), 37 tokens of which some read
// rows of 11 ids and the others keep their own.
TEST(CudaKernels, FeedTokens) {
  std::mt19937 rng(7);
  const int64_t T = 37, R = 11;
  std::vector<int32_t> prev(R), src(T), ids(T);
  for (auto& x : prev) x = static_cast<int32_t>(rng() % 50000);
  for (int64_t t = 0; t < T; ++t) {
    src[t] = rng() % 3 == 0 ? -1 : static_cast<int32_t>(rng() % R);
    ids[t] = static_cast<int32_t>(rng() % 50000);
  }
  ForwardBatch b;
  b.token_ids = ids;
  b.token_src = src;
  feed_tokens(b, prev);
  DeviceBuffer d_ids = test::upload(ids), d_src = test::upload(src), d_prev = test::upload(prev);
  cuda::feed_tokens(d_ids.as<int32_t>(), d_src.as<int32_t>(), d_prev.as<int32_t>(), T, nullptr);
  EXPECT_EQ(download<int32_t>(d_ids, T), b.token_ids);
}

// An array kept on the device copies only when it changes, in size or in any element.
TEST(CudaKernels, ResidentUploadCopiesChangesOnly) {
  ResidentUpload<int32_t> r;
  std::vector<int32_t> v(1001);
  std::iota(v.begin(), v.end(), 5);
  const int32_t* d = r.update(v, nullptr);
  const int32_t* again = r.update(v, nullptr);
  EXPECT_EQ(d, again);
  EXPECT_EQ(r.uploads(), 1);
  v[777] = -3;  // same size, one element
  d = r.update(v, nullptr);
  EXPECT_EQ(r.uploads(), 2);
  std::vector<int32_t> got(v.size());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(got.data(), d, got.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, v);
  v.resize(999);
  r.update(v, nullptr);
  EXPECT_EQ(r.uploads(), 3);
  v.clear();
  r.update(v, nullptr);
  r.update(v, nullptr);
  EXPECT_EQ(r.uploads(), 4);
}

TEST(CudaKernels, ArgmaxRows) {
  REQUIRE_GPU();
  struct Case {
    int64_t R, ld, n;
  };
  for (Case c : {Case{1, 1, 1}, Case{3, 1000, 1000}, Case{5, 1031, 17}, Case{7, 128256, 128000}, Case{33, 151669, 151665},
                 Case{130, 32768, 32768}}) {
    auto logits = randn(static_cast<size_t>(c.R * c.ld), static_cast<uint64_t>(c.R * 7 + c.n));
    // Ties: in every other row the maximum appears twice (the lower index must win), and ids at
    // or past n are larger than everything (they must not compete).
    for (int64_t r = 0; r < c.R; ++r) {
      float* row = logits.data() + r * c.ld;
      if (r % 2 == 0 && c.n >= 3) row[c.n - 1] = row[c.n / 3] = 50.0f;
      for (int64_t i = c.n; i < c.ld; ++i) row[i] = 1e9f;
    }
    std::vector<int32_t> ref(static_cast<size_t>(c.R));
    cpu::argmax_rows(logits.data(), c.R, c.ld, c.n, ref.data());
    auto d_l = upload(logits);
    auto d_o = poisoned(static_cast<size_t>(c.R) * 4);
    cuda::argmax_rows(d_l.as<float>(), c.R, c.ld, c.n, d_o.as<int32_t>(), nullptr);
    expect_ids(name("argmax", {{"R", c.R}, {"ld", c.ld}, {"n", c.n}}), download<int32_t>(d_o, ref.size()), ref);
  }
}

// Device sampling against its twin on random logits at odd shapes and every kind of parameter
// (greedy, temperature only, top-k with ties at the threshold, top-p, both, min-p with and without them).
TEST(CudaKernels, SampleRows) {
  REQUIRE_GPU();
  struct Case {
    int64_t R, ld, n;
  };
  const RowSampling kinds[] = {{0.0f, 0, 1.0f, 0}, {0.7f, 0, 1.0f, 0}, {1.3f, 7, 1.0f, 0}, {1.0f, 0, 0.8f, 0},
                               {0.9f, 40, 0.6f, 0}, {2.0f, 1, 1.0f, 0}, {0.5f, 100000, 0.95f, 0},
                               {0.8f, 40, 0.95f, 0, min_p_gap(0.8f, 0.05f)}, {1.5f, 0, 1.0f, 0, min_p_gap(1.5f, 0.01f)}};
  constexpr int64_t kKinds = sizeof kinds / sizeof kinds[0];
  for (Case c : {Case{1, 1, 1}, Case{7, 1000, 1000}, Case{9, 1031, 17}, Case{14, 49152, 49152},
                 Case{21, 151669, 151665}, Case{130, 32768, 32768}}) {
    auto logits = randn(static_cast<size_t>(c.R * c.ld), static_cast<uint64_t>(c.R * 11 + c.n));
    std::mt19937 rng(static_cast<uint32_t>(c.n));
    std::vector<RowSampling> params(static_cast<size_t>(c.R));
    for (int64_t r = 0; r < c.R; ++r) {
      float* row = logits.data() + r * c.ld;
      for (int64_t i = 0; i < c.n; ++i) row[i] *= 3.0f;
      if (r % 3 == 1 && c.n >= 10)  // ties at the top
        for (int64_t i = 0; i < 10; ++i) row[i * (c.n / 10)] = 12.0f;
      for (int64_t i = c.n; i < c.ld; ++i) row[i] = 1e9f;  // must not compete
      params[static_cast<size_t>(r)] = kinds[r % kKinds];
      params[static_cast<size_t>(r)].u = std::uniform_real_distribution<float>(0.0f, 0.9999f)(rng);
    }
    std::vector<int32_t> ref(static_cast<size_t>(c.R));
    cpu::sample_rows(logits.data(), c.R, c.ld, c.n, params.data(), ref.data());
    auto d_l = upload(logits);
    auto d_p = upload(params);
    auto d_o = poisoned(static_cast<size_t>(c.R) * 4);
    cuda::sample_rows(d_l.as<float>(), c.R, c.ld, c.n, d_p.as<RowSampling>(), d_o.as<int32_t>(), nullptr);
    expect_ids(name("sample", {{"R", c.R}, {"ld", c.ld}, {"n", c.n}}), download<int32_t>(d_o, ref.size()), ref);
  }
}

// The device's draws follow the distribution: one row of logits repeated with stratified draws
// u = (i + 0.5) / R gives each kept id its share of R within one count (inverse CDF in id order).
TEST(CudaKernels, SampleRowsDistribution) {
  REQUIRE_GPU();
  const int64_t V = 50, R = 20000;
  auto base = randn(static_cast<size_t>(V), 99);
  for (const RowSampling k : {RowSampling{0.8f, 0, 1.0f, 0}, RowSampling{1.2f, 9, 1.0f, 0}, RowSampling{1.0f, 0, 0.7f, 0},
                              RowSampling{0.6f, 20, 0.9f, 0}, RowSampling{1.0f, 0, 1.0f, 0, min_p_gap(1.0f, 0.1f)},
                              RowSampling{0.8f, 40, 0.95f, 0, min_p_gap(0.8f, 0.05f)}}) {
    std::vector<float> logits(static_cast<size_t>(R * V));
    std::vector<RowSampling> params(static_cast<size_t>(R), k);
    for (int64_t r = 0; r < R; ++r) {
      std::copy(base.begin(), base.end(), logits.begin() + r * V);
      params[static_cast<size_t>(r)].u = (static_cast<float>(r) + 0.5f) / static_cast<float>(R);
    }
    const std::vector<double> want = test::sampling_probabilities(base, k);
    auto d_l = upload(logits);
    auto d_p = upload(params);
    auto d_o = poisoned(static_cast<size_t>(R) * 4);
    cuda::sample_rows(d_l.as<float>(), R, V, V, d_p.as<RowSampling>(), d_o.as<int32_t>(), nullptr);
    const auto got = download<int32_t>(d_o, static_cast<size_t>(R));
    std::vector<int64_t> count(static_cast<size_t>(V), 0);
    for (int32_t id : got) {
      ASSERT_TRUE(id >= 0 && id < V);
      ++count[static_cast<size_t>(id)];
    }
    double worst = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double diff = std::abs(static_cast<double>(count[static_cast<size_t>(i)]) - want[static_cast<size_t>(i)] * R);
      worst = std::max(worst, diff);
      if (want[static_cast<size_t>(i)] == 0.0) EXPECT_EQ(count[static_cast<size_t>(i)], 0) << "id " << i << " is not kept";
    }
    EXPECT_LE(worst, 2.0) << "T " << k.temperature << " top_k " << k.top_k << " top_p " << k.top_p;
    test::note("sample_distribution/T" + std::to_string(k.temperature) + "_k" + std::to_string(k.top_k) + "_p" +
                   std::to_string(k.top_p),
               "max |count - R p| = " + std::to_string(worst));
  }
}

TEST(CudaKernels, SimilarityTopK) {
  REQUIRE_GPU();
  struct Case {
    int64_t N, D;
    int32_t k;
  };
  int case_id = 0;
  for (Case c : {Case{1, 384, 1}, Case{17, 100, 5}, Case{1000, 384, 50}, Case{1000, 1024, 1000}, Case{100000, 384, 20},
                 Case{100000, 768, 1024}}) {
    for (bool bf : {false, true}) {
      ++case_id;
      auto m = randn(static_cast<size_t>(c.N * c.D), 40 + case_id);
      if (bf) m = round_bf16(m);
      const auto q = randn(static_cast<size_t>(c.D), 41 + case_id);
      std::vector<int32_t> rid(static_cast<size_t>(c.k));
      std::vector<float> rs(static_cast<size_t>(c.k));
      cpu::similarity_topk(m.data(), q.data(), c.N, c.D, c.k, rid.data(), rs.data());
      DeviceBuffer d_m = bf ? upload(to_bf16(m)) : upload(m);
      auto d_q = upload(q);
      const size_t ws = cuda::similarity_topk_workspace_bytes(c.N, c.k);
      auto d_ws = poisoned(ws), d_ids = poisoned(static_cast<size_t>(c.k) * 4), d_sc = poisoned(static_cast<size_t>(c.k) * 4);
      cuda::similarity_topk(d_m.data(), bf, d_q.as<float>(), c.N, c.D, c.k, d_ids.as<int32_t>(), d_sc.as<float>(),
                            d_ws.data(), ws, nullptr);
      const auto gid = download<int32_t>(d_ids, rid.size());
      const auto gsc = download<float>(d_sc, rs.size());
      // Scores must match rank by rank; ids may differ only where two scores are within f32 noise.
      const std::string n = name("topk", {{"N", c.N}, {"D", c.D}, {"k", c.k}, {"bf16", bf}});
      record(n + "/scores", compare(gsc, rs), 1e-5);
      int mismatched = 0;
      std::set<int32_t> seen;
      for (int32_t i = 0; i < c.k; ++i) {
        const int32_t id = gid[static_cast<size_t>(i)];
        EXPECT_TRUE(id >= 0 && id < c.N && seen.insert(id).second) << n << " rank " << i << " id " << id;
        if (id != rid[static_cast<size_t>(i)]) {
          ++mismatched;
          EXPECT_NEAR(gsc[static_cast<size_t>(i)], rs[static_cast<size_t>(i)], 1e-4 * (1 + std::abs(rs[static_cast<size_t>(i)])))
              << n << " rank " << i;
        }
      }
      test::note(n + "/ids", std::to_string(c.k - mismatched) + "/" + std::to_string(c.k) + " ids equal (rest: ties)");
    }
  }
}

}  // namespace
}  // namespace inferscale
