// Decode attention on tensor cores: attention_plan.h's one-token tiles (rows_per_tile == group
// <= 8), over a bf16 or an FP8 cache.
//
// A decode tile is one token's `group` query heads of one kv head: 4 real rows at GQA 4. The
// prefill tiles spend a 16-row MMA on them (4x the work, and the softmax bookkeeping of 12 idle
// rows). Here the operands are swapped: the kv entries are the MMA's 16 rows, the queries its 8
// columns (those past the group are zero),
//   S^T [16 entries, 8 q] = K [16, D] . Q^T [D, 8]          A = K (ldmatrix), B = Q^T (registers)
//   O^T [D, 8]           += V^T [D, 16] . P^T [16, 8]       A = V^T (ldmatrix.trans), B = P^T
// so a step of 16 entries is D / 16 MMAs each way, and a lane's softmax state is its two queries
// (columns 2t, 2t + 1; g = lane / 4, t = lane % 4). P^T's B fragment is S^T's C fragment, rounded
// and transposed by movmatrix.
//
// CTA = one work item x one kv head (work_item_grid), 4 warps. Warp w walks its own steps, entries
// first + 16 (w + 4 i) .. + 15, through its own cp.async pipeline of kStages steps in its own
// shared memory: no barrier between warps until the epilogue merges their (m, l, O^T) through
// shared memory. Block steps (block_size a power of two >= 16, the engine's 16): first is
// kv_begin rounded down to a multiple of 16, so a step's 16 entries lie in one block and one
// block-table read (the same in every lane) addresses them all; the entries before kv_begin are
// zero-filled and masked. Otherwise first = kv_begin and each lane looks up its own entry's slot
// (a division by block_size) and shares it by shuffles. Per warp stage: K [16][D] and V [16][D] (bf16, or E4M3 codes; rows swizzled by
// 16-byte chunk, attention_smem.cuh), FP8: then K scales [16], V scales [16].
//
// Facts read in place (AttentionArgs::fact_*, bf16 only) take the per-lane steps: a lane's entry
// inside its sequence's facts has the pool slot -1 - slot, its K and V are copied from the pool,
// and once the step has landed the warp rotates those keys in its stage (FactAngles, the rotation
// injection applies) before the MMAs read them; the angles of step i + 1's facts are loaded into
// registers while step i computes.
//
// FP8 (KvCache::fp8): the MMAs run in f16; codes widen exactly, in registers, to their values
// (cvt.rn.f16x2.e4m3x2, fp8_utils.cuh).
//   K: ldmatrix of codes hands lane (g, t) codes 4t .. 4t + 3 of entry g (of a 16-dim chunk), so
//      the A fragment's k index 2t + e is d = 4t + e and 8 + 2t + e is d = 4t + 2 + e; Q^T's
//      fragments are loaded under the same permutation, and a score is multiplied by its entry's
//      scale.
//   V: a transposing ldmatrix of code pairs hands lane (g, t) entries 2t, 2t + 1 of dims 2g, 2g + 1
//      (of chunk c), so m-tile c's A rows are d = 16 c + 2 g (row g) and 16 c + 2 g + 1 (row g + 8);
//      V's scales x 2^8 are folded into P before it is rounded to f16 (2^8 keeps small scales
//      out of f16's subnormals; l sums P itself, and the epilogue takes O x 2^-8).
// q, and P x V's scale x 2^8, must be within f16's range.
#include <cmath>

#include "backend/cuda/attention_smem.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kStep = 16;  // kv entries a warp computes at once (the MMA's rows)
constexpr float kPScale = 256.0f;  // FP8: the 2^8 that P carries with V's scales (above)

// Byte sizes of one warp's pipeline. D = 128: bf16 3 stages of 8 KB (96 KB a CTA, 2 CTAs an SM);
// FP8 3 stages of 4.1 KB (50 KB a CTA, 4 CTAs an SM: the widening makes FP8 issue-bound, so it
// wants more warps to hide latency more than a deeper pipeline).
template <int D, bool FP8>
struct DecodeSmem {
  static constexpr int kStages = 3;
  static constexpr int tile = kStep * D * (FP8 ? 1 : 2);  // K (or V) of one step
  static constexpr int scales = FP8 ? 2 * kStep * static_cast<int>(sizeof(float)) : 0;
  static constexpr int stage = 2 * tile + scales;
  static constexpr int warp = kStages * stage;
  static constexpr int bytes = kWarps * warp;
  // The epilogue's scratch, in a warp's own stages: O^T [D][8] f32, m [8], l [8].
  static constexpr int scratch = (D * 8 + 16) * static_cast<int>(sizeof(float));
  static_assert(scratch <= warp, "merge scratch in the stages");
};

template <int D, bool FP8, bool kBlockSteps>
__global__ void __launch_bounds__(kThreads) attention_decode_mma_kernel(AttentionArgs a) {
  static_assert(D == 64 || D == 128, "head_dim");
  using L = DecodeSmem<D, FP8>;
  constexpr int kStages = L::kStages;
  constexpr int kElem = FP8 ? 1 : 2;
  constexpr int kChunks = D * kElem / 16;        // 16-byte chunks of one entry's K (or V) row
  constexpr int kRowsPerPass = 32 / kChunks;     // entries a warp's copy instruction covers
  constexpr int kPasses = kStep / kRowsPerPass;
  static_assert(kChunks <= 32 && kStep % kRowsPerPass == 0, "copy passes");
  extern __shared__ __align__(16) unsigned char smem_raw[];

  // The work item, its block table and the first steps' slots are metadata (launch.cuh): read
  // before the wait, while the kernel before (the QKV append) finishes. Q and K / V after it.
  const int item = grid_work_item(a.num_items, a.counts);
  if (item < 0) return;
  const AttnWorkItem it = a.items[item];
  const int kvh = grid_kv_head();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_base = a.kv_indptr[it.kv_seq];
  unsigned char* ws = smem_raw + warp * L::warp;

  const int first = kBlockSteps ? it.kv_begin & ~(kStep - 1) : it.kv_begin;  // the CTA's steps start here
  const int steps = (it.kv_end - first + kStep - 1) / kStep;  // of the CTA
  const int n = steps > warp ? (steps - warp + kWarps - 1) / kWarps : 0;  // of this warp
  auto entry0 = [&](int i) { return first + (warp + kWarps * i) * kStep; };
  // Where step i reads. Block steps: the cache slot of its entry 0, in every lane (its entry r is
  // slot + r). Else, lanes l and l + 16: the slot of its entry l % 16. 0 past kv_end (never read).
  const int block_shift = __ffs(a.block_size) - 1;  // block steps: block_size is a power of two
  // Facts read in place (per-lane steps only): entries [fa, fb) are pool slots fact_slots[f0 + j - fa].
  int fa = 0, fb = 0, f0 = 0;
  if (!kBlockSteps && !FP8 && a.fact_indptr != nullptr) {
    f0 = a.fact_indptr[it.kv_seq];
    fa = a.fact_start[it.kv_seq];
    fb = fa + a.fact_indptr[it.kv_seq + 1] - f0;
  }
  auto slot_of = [&](int i) -> uint32_t {
    if constexpr (kBlockSteps) {
      const int j = entry0(i);
      return j < it.kv_end ? static_cast<uint32_t>(a.kv_indices[kv_base + (j >> block_shift)] * a.block_size +
                                                   (j & (a.block_size - 1)))
                           : 0u;
    } else {
      const int j = entry0(i) + (lane & 15);
      if (j >= it.kv_end) return 0u;
      if (j >= fa && j < fb) return static_cast<uint32_t>(-1 - a.fact_slots[f0 + j - fa]);
      return static_cast<uint32_t>(a.kv_indices[kv_base + j / a.block_size] * a.block_size + j % a.block_size);
    }
  };
  uint32_t first_slots[kStages - 1];
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) first_slots[c] = slot_of(c);
  uint32_t next_slot = slot_of(kStages - 1);  // the slot of the step the loop issues next
  pdl_begin();

  // Step i into `stage` (i % kStages): lane l copies chunk l % kChunks of entries l / kChunks +
  // p * kRowsPerPass, K and V (zero-filled past kv_end, and before kv_begin), FP8: lane l < 16 the
  // K scale of entry l, lane 16 + l its V scale.
  const unsigned char* k_base = static_cast<const unsigned char*>(a.cache.k) + static_cast<size_t>(kvh) * D * kElem;
  const unsigned char* v_base = static_cast<const unsigned char*>(a.cache.v) + static_cast<size_t>(kvh) * D * kElem;
  const size_t slot_stride = static_cast<size_t>(a.num_kv_heads) * D * kElem;  // bytes
  const unsigned char* kp_base = a.pool.k == nullptr ? k_base : static_cast<const unsigned char*>(a.pool.k) + static_cast<size_t>(kvh) * D * kElem;
  const unsigned char* vp_base = a.pool.v == nullptr ? v_base : static_cast<const unsigned char*>(a.pool.v) + static_cast<size_t>(kvh) * D * kElem;
  const int r0 = lane / kChunks, ch = lane % kChunks;
  const uint32_t ws_s = pinned(smem_addr(ws));  // the warp's stages in the shared window
  // Block steps: a lane's copies sit at the same offsets from its step's first slot every step: per
  // pass its row's bytes in the cache and its swizzled place in a stage; FP8: its scale's address
  // but for the slot. Computed once and pinned in registers (ptxas would otherwise recompute them
  // from threadIdx in every step: ~70 of a step's ~430 instructions, counted in the SASS).
  uint32_t g_off[kPasses] = {}, s_off[kPasses] = {};
  int r_first = r0, l15 = lane & 15;
  const float* scale_lane = nullptr;
  uint32_t scale_so = 0;
  if constexpr (kBlockSteps) {
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int r = r0 + p * kRowsPerPass;
      g_off[p] = pinned(static_cast<uint32_t>(r * slot_stride + ch * 16));
      s_off[p] = pinned(static_cast<uint32_t>(FP8 ? swz8<D>(r, ch) : swz<D>(r, ch) * 2));
    }
    r_first = pinned(r0);
    l15 = pinned(l15);
    if constexpr (FP8) {
      scale_lane = pinned((lane < 16 ? a.cache.k_scale : a.cache.v_scale) + static_cast<int64_t>(l15) * a.num_kv_heads + kvh);
      scale_so = pinned(static_cast<uint32_t>(2 * L::tile + lane * 4));
    }
  }
  auto load = [&](int i, uint32_t slot, int stage) {
    const uint32_t st = ws_s + stage * L::stage;
    const int rows = it.kv_end - entry0(i);
    if constexpr (kBlockSteps) {
      const int skip = it.kv_begin - entry0(i);  // > 0 only in a first step that starts before kv_begin
      const size_t step = static_cast<size_t>(slot) * slot_stride;
      const unsigned char* kp = k_base + step;
      const unsigned char* vp = v_base + step;
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const int r = r_first + p * kRowsPerPass;
        const bool in = r < rows && r >= skip;
        cp_async_16(st + s_off[p], kp + g_off[p], in);
        cp_async_16(st + L::tile + s_off[p], vp + g_off[p], in);
      }
      if constexpr (FP8) {
        cp_async_4(st + scale_so, scale_lane + static_cast<int64_t>(slot) * a.num_kv_heads, l15 < rows && l15 >= skip);
      }
    } else {
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const int r = r0 + p * kRowsPerPass;
        const auto e = static_cast<int32_t>(__shfl_sync(0xffffffffu, slot, r));
        const bool pooled = !FP8 && e < 0;  // a fact read in place
        const size_t off = static_cast<size_t>(static_cast<uint32_t>(pooled ? -1 - e : e)) * slot_stride + ch * 16;
        const int so = FP8 ? swz8<D>(r, ch) : swz<D>(r, ch) * 2;
        cp_async_16(st + so, (pooled ? kp_base : k_base) + off, r < rows);
        cp_async_16(st + L::tile + so, (pooled ? vp_base : v_base) + off, r < rows);
      }
      if constexpr (FP8) {
        const float* src = (lane < 16 ? a.cache.k_scale : a.cache.v_scale) + static_cast<int64_t>(slot) * a.num_kv_heads + kvh;
        cp_async_4(st + 2 * L::tile + lane * 4, src, (lane & 15) < rows);
      }
    }
  };
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) {
    if (c < n) load(c, first_slots[c], c);
    cp_async_commit();  // one group a step, empty or not: wait<kStages - 2> means "step i landed"
  }

  // Q^T's B fragments, column g = query row row_begin + g (zero past row_end): bf16, d = 16 ks +
  // 2t .. and 16 ks + 8 + 2t ..; FP8: f16, d = 16 ks + 4t .. 4t + 3 (the K codes' permutation).
  const int qrow = it.row_begin + g;
  const bool q_valid = qrow < it.row_end;
  const bf16* qp = a.q + ((it.q_start + qrow / group) * static_cast<int64_t>(a.num_heads) + kvh * group + qrow % group) * D;
  uint32_t qf[D / 16][2];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    if constexpr (FP8) {
      const uint2 w = q_valid ? *reinterpret_cast<const uint2*>(qp + 16 * ks + 4 * t4) : make_uint2(0u, 0u);
      qf[ks][0] = bf16x2_to_f16x2(w.x);
      qf[ks][1] = bf16x2_to_f16x2(w.y);
    } else {
      qf[ks][0] = q_valid ? *reinterpret_cast<const uint32_t*>(qp + 16 * ks + 2 * t4) : 0u;
      qf[ks][1] = q_valid ? *reinterpret_cast<const uint32_t*>(qp + 16 * ks + 8 + 2 * t4) : 0u;
    }
  }

  // O^T m-tiles: o[mt][0..1] = (row g, queries 2t, 2t + 1), o[mt][2..3] = (row g + 8, ...); rows
  // are dims (the epilogue's d). m, l: queries 2t, 2t + 1 (l lane-partial: this lane's entries).
  float o[D / 16][4];
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale_log2 = a.scale * kLog2e;
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix row address of K / FP8 V
  // FP8: the lane's ldmatrix offsets in a K (or V) tile, one per pair of 16-dim chunks (pinned).
  uint32_t ld_off[FP8 ? D / 32 : 1] = {};
  if constexpr (FP8) {
#pragma unroll
    for (int c = 0; c < D / 32; ++c) ld_off[c] = pinned(static_cast<uint32_t>(swz8<D>(a_row, 2 * c + (lane >> 4))));
  }

  // Facts read in place: step i holds some when its entries meet [fa, fb); their keys' angles are
  // loaded into registers a step ahead (while step i - 1 computes), rotated once step i has landed.
  FactAngles<D, kStep, 32> angles;
  auto has_facts = [&](int i) { return i < n && entry0(i) < fb && entry0(i) + kStep > fa; };
  auto load_angles = [&](int i) { angles.load(entry0(i), max(fa, entry0(i)), min(fb, it.kv_end), a, lane); };
  if constexpr (!FP8 && !kBlockSteps) {
    if (has_facts(0)) load_angles(0);
  }

  for (int i = 0, stage = 0; i < n; ++i, stage = stage == kStages - 1 ? 0 : stage + 1) {  // stage = i % kStages
    cp_async_wait<kStages - 2>();  // this lane's copies of step i have landed
    __syncwarp();                  // every lane's are visible; every lane is done with step i - 1
    if (i + kStages - 1 < n) load(i + kStages - 1, next_slot, stage == 0 ? kStages - 1 : stage - 1);
    cp_async_commit();
    next_slot = slot_of(i + kStages);
    const uint32_t st = ws_s + stage * L::stage;
    if constexpr (!FP8 && !kBlockSteps) {
      const int e0 = entry0(i);
      if (has_facts(i)) {  // the step's facts read in place: their keys, rotated
        angles.rotate(reinterpret_cast<bf16*>(ws + stage * L::stage), e0, max(fa, e0), min(fb, it.kv_end), a.interleaved, lane);
        __syncwarp();
      }
      if (has_facts(i + 1)) load_angles(i + 1);
    }
    const uint32_t sc = st + 2 * L::tile;  // FP8: K scales [16], V scales [16] (f32)

    // S^T = K Q^T, in two accumulators (even / odd k-steps) to halve the dependent chain.
    float s0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (FP8) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ks += 2) {
        uint32_t w[4], ka[4], kb[4];  // w: (entries 0-7, ks), (8-15, ks), (0-7, ks + 1), (8-15, ks + 1)
        ldmatrix_x4(w, st + ld_off[ks / 2]);
        e4m3x4_to_f16x2x2(w[0], ka[0], ka[2]);
        e4m3x4_to_f16x2x2(w[1], ka[1], ka[3]);
        e4m3x4_to_f16x2x2(w[2], kb[0], kb[2]);
        e4m3x4_to_f16x2x2(w[3], kb[1], kb[3]);
        mma_f16_16816(s0, ka, qf[ks][0], qf[ks][1]);
        mma_f16_16816(s1, kb, qf[ks + 1][0], qf[ks + 1][1]);
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t ka[4];
        ldmatrix_x4(ka, st + 2 * swz<D>(a_row, 2 * ks + (lane >> 4)));
        if (ks & 1) {
          mma_bf16_16816(s1, ka, qf[ks][0], qf[ks][1]);
        } else {
          mma_bf16_16816(s0, ka, qf[ks][0], qf[ks][1]);
        }
      }
    }

    // Scale and mask (entries g: s[0], s[1]; g + 8: s[2], s[3]), online softmax over the 8 lanes
    // of a column (shuffles across g).
    const int j0 = entry0(i) + g;
    float sl0 = scale_log2, sl1 = scale_log2;
    if constexpr (FP8) {
      sl0 *= lds_f32(sc + 4 * g);
      sl1 *= lds_f32(sc + 4 * (g + 8));
    }
    float s[4];
    const bool in0 = j0 < it.kv_end && (!kBlockSteps || j0 >= it.kv_begin);
    const bool in1 = j0 + 8 < it.kv_end && (!kBlockSteps || j0 + 8 >= it.kv_begin);
    s[0] = in0 ? (s0[0] + s1[0]) * sl0 : -INFINITY;
    s[1] = in0 ? (s0[1] + s1[1]) * sl0 : -INFINITY;
    s[2] = in1 ? (s0[2] + s1[2]) * sl1 : -INFINITY;
    s[3] = in1 ? (s0[3] + s1[3]) * sl1 : -INFINITY;
    float alpha[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(s[h], s[h + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[h], mx);
      // Nothing seen yet: keep o = 0, l = 0 (exp2 of -inf - -inf would be NaN).
      alpha[h] = m_new == -INFINITY ? 1.0f : exp2_ftz(m[h] - m_new);
      base[h] = m_new == -INFINITY ? 0.0f : m_new;
      m[h] = m_new;
    }
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = exp2_ftz(s[e] - base[e & 1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + p[h] + p[h + 2];
    // Rescale O only when some query's max moved (after the first steps it rarely does).
    if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        o[mt][0] *= alpha[0];
        o[mt][1] *= alpha[1];
        o[mt][2] *= alpha[0];
        o[mt][3] *= alpha[1];
      }
    }

    // P^T's B fragment: b0 = entries 2t, 2t + 1 of column g, b1 = entries 8 + 2t, 9 + 2t.
    uint32_t b0, b1;
    if constexpr (FP8) {
      const float v0 = kPScale * lds_f32(sc + 4 * (kStep + g)), v1 = kPScale * lds_f32(sc + 4 * (kStep + g + 8));
      b0 = movmatrix_trans(pack_f16x2(p[0] * v0, p[1] * v0));
      b1 = movmatrix_trans(pack_f16x2(p[2] * v1, p[3] * v1));
    } else {
      b0 = movmatrix_trans(pack_bf16x2(p[0], p[1]));
      b1 = movmatrix_trans(pack_bf16x2(p[2], p[3]));
    }

    // O^T += V^T P^T.
    const uint32_t vt = st + L::tile;
    if constexpr (FP8) {
#pragma unroll
      for (int c = 0; c < D / 16; c += 2) {
        uint32_t w[4], va[4], vb[4];  // w: (entries 0-7, chunk c), (8-15, c), (0-7, c + 1), (8-15, c + 1)
        ldmatrix_x4_trans(w, vt + ld_off[c / 2]);
        e4m3x4_to_f16x2x2_interleaved(w[0], va[0], va[1]);
        e4m3x4_to_f16x2x2_interleaved(w[1], va[2], va[3]);
        e4m3x4_to_f16x2x2_interleaved(w[2], vb[0], vb[1]);
        e4m3x4_to_f16x2x2_interleaved(w[3], vb[2], vb[3]);
        mma_f16_16816(o[c], va, b0, b1);
        mma_f16_16816(o[c + 1], vb, b0, b1);
      }
    } else {
      // Matrices (entries 0-7, dims 16 mt ..), (0-7, 16 mt + 8 ..), (8-15, 16 mt ..), (8-15, 16 mt + 8 ..).
      const int v_row = (lane & 7) + ((lane >> 4) & 1) * 8, v_half = (lane >> 3) & 1;
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        uint32_t va[4];
        ldmatrix_x4_trans(va, vt + 2 * swz<D>(v_row, 2 * mt + v_half));
        mma_bf16_16816(o[mt], va, b0, b1);
      }
    }
  }
  cp_async_wait<0>();  // nothing in flight when the stages become scratch
  __syncwarp();

  // Epilogue: each warp's (m, l, O^T) into its own stages, then every thread combines the four
  // warps for a share of the tile's rows x D.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 4);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 8);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 16);
  }
  float* sO = reinterpret_cast<float*>(ws);  // [D][8]
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = FP8 ? 16 * mt + 2 * g + h : 16 * mt + g + 8 * h;  // the dim of A row g + 8 h
      *reinterpret_cast<float2*>(sO + d * 8 + 2 * t4) = make_float2(o[mt][2 * h], o[mt][2 * h + 1]);
    }
  }
  if (g == 0) {
    float* sM = sO + D * 8;
    sM[2 * t4] = m[0];
    sM[2 * t4 + 1] = m[1];
    sM[8 + 2 * t4] = l[0];
    sM[8 + 2 * t4 + 1] = l[1];
  }
  __syncthreads();
  const int rows = it.row_end - it.row_begin;
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    auto warp_o = [&](int w) { return reinterpret_cast<const float*>(smem_raw + w * L::warp); };
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, warp_o(w)[D * 8 + r]);
    float ll = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* wo = warp_o(w);
      const float mw = wo[D * 8 + r];
      const float wt = mw == -INFINITY ? 0.0f : exp2f(mw - mm);  // a warp that saw nothing weighs 0
      ll += wt * wo[D * 8 + 8 + r];
      acc += wt * wo[d * 8 + r];
    }
    const float inv = ll > 0.0f ? (FP8 ? 1.0f / kPScale : 1.0f) / ll : 0.0f;
    const int pr = it.row_begin + r;
    if (it.partial < 0) {
      const int64_t tok = it.q_start + pr / group;
      a.out[(tok * a.num_heads + kvh * group + pr % group) * D + d] = __float2bfloat16_rn(acc * inv);
    } else {
      const int64_t prow = (static_cast<int64_t>(it.partial) * a.num_kv_heads + kvh) * a.rows_per_tile + r;
      a.partial_o[prow * D + d] = acc * inv;
      if (d == 0) a.partial_lse[prow] = ll > 0.0f ? mm + log2f(ll) : -INFINITY;
    }
  }
}

template <int D, bool FP8, bool kBlockSteps>
void launch_decode_mma(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int smem = DecodeSmem<D, FP8>::bytes;
  auto* kernel = attention_decode_mma_kernel<D, FP8, kBlockSteps>;
  static bool configured = false;  // the attributes are per function; set them once
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    configured = true;
  }
  launch(kernel, work_item_grid(a.num_items, a.num_kv_heads), dim3(kThreads), static_cast<size_t>(smem), stream, a);
}

template <int D, bool FP8>
void launch_decode_mma(const AttentionArgs& a, cudaStream_t stream) {
  // Facts read in place take the per-lane steps (an entry's slot may be the pool's).
  const bool block_steps = a.block_size >= kStep && (a.block_size & (a.block_size - 1)) == 0 && a.fact_indptr == nullptr;
  block_steps ? launch_decode_mma<D, FP8, true>(a, stream) : launch_decode_mma<D, FP8, false>(a, stream);
}

}  // namespace

void attention_decode_mma(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_items == 0) return;
  const int group = a.num_kv_heads > 0 ? a.num_heads / a.num_kv_heads : 0;
  KERNEL_REQUIRE(a.num_heads % a.num_kv_heads == 0 && group >= 1 && group <= kDecodeMaxGroup,
                 "attention_decode_mma: group must be 1..8");
  KERNEL_REQUIRE(a.rows_per_tile == group, "attention_decode_mma: plan with rows_per_tile == group");
  switch (a.head_dim) {
    case 64: a.cache.fp8 ? launch_decode_mma<64, true>(a, stream) : launch_decode_mma<64, false>(a, stream); break;
    case 128: a.cache.fp8 ? launch_decode_mma<128, true>(a, stream) : launch_decode_mma<128, false>(a, stream); break;
    default: KERNEL_REQUIRE(false, "attention_decode_mma: head_dim must be 64 or 128");
  }
}

}  // namespace inferscale::cuda
