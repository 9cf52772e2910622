// Paged attention on tensor cores (FlashAttention-2 style), causal by position, GQA-packed rows.
//
// CTA = one work item (attention_plan.h) x one kv head (work_item_grid); 4 warps, 16 packed rows each:
//
//   sQ [64 rows][D]      rows = packed (token, query head of this kv head)
//   sK [3][64 kv][D]     a 3-stage cp.async pipeline of kv chunks gathered through the block table:
//   sV [3][64 kv][D]     chunk i computed while i + 1 and i + 2 are in flight (one barrier a chunk)
//   sSlot [4][64] int32  the pool slot of each entry of chunks i + 2 .. i + 4 (see below)
//
// A narrow tile (at most 16 rows, e.g. a decode step's token x group) would leave warps 1-3 with
// nothing to compute: instead all four take the same 16 rows and entries 16 w .. 16 w + 15 of each
// chunk, each keeps its own online softmax (m, l, o), and the epilogue merges the four through
// shared memory (the stages, free by then).
//
// An FP8 cache (KvCache::fp8, FP8 = true): the MMAs run in f16 (E4M3 codes widen to f16 exactly:
// fp8_utils.cuh). The stages hold codes (half the bytes) and each
// entry's scale, sK8 / sV8 [5][64 kv][D] uint8 and sKs / sVs [5][64] f32: five stages, so that the
// bytes in flight match the bf16 pipeline's.
//   K: read as codes by ldmatrix (16 codes of a row are 8 b16 "elements"; a lane receives codes
//      4t .. 4t + 3 of its row), widened in registers; Q's fragments are loaded with the same
//      permutation of d (MMA k index 2t + e <-> d = 4t + e, 8 + 2t + e <-> 4t + 2 + e), so the dot
//      products are unchanged, and each score is multiplied by its entry's scale.
//   V: after chunk i lands every thread widens a share of it, times its scale, into sVb [64 kv][D]
//      f16 (one more barrier a chunk), which the PV MMAs read as they read a bf16 stage; sVb is
//      where sQ was (Q lives in registers after chunk 0).
// q, and V times its scales, must be within f16's range.
//
// Per chunk, per warp: S = Q K^T (16 x 64, f32 in registers) -> mask (kv j > position of the
// row's token, or j >= kv_end) -> online softmax in the log2 domain -> O += P V with P rounded
// to bf16 as the A operand. Shared tiles are XOR-swizzled by 16-byte chunk
// (chunk' = chunk ^ (row % 8)) so that ldmatrix's 8 row addresses hit distinct banks.
#include <cmath>

#include "backend/cuda/attention_smem.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kBM = kPrefillRowsPerTile;  // 64 packed rows per CTA
constexpr int kBN = kPrefillKvChunk;      // 64 kv entries per chunk
constexpr int kThreads = 128;             // 4 warps x 16 rows
// kv chunks in shared memory: chunk i computed while the next kStages - 1 are in flight (bf16:
// 3 stages; FP8: 5, the same bytes in flight); slot tables kept kLookahead chunks ahead.
template <bool FP8>
struct Pipe {
  static constexpr int kStages = FP8 ? 5 : 3;
  static constexpr int kLookahead = kStages;
  static constexpr int kTables = kLookahead + 1;
};

// Byte offsets of the shared tiles. At D = 128 the bf16 layout is 113 KB: two CTAs an SM (the 2
// per __launch_bounds__ and the register budget) take the whole 228 KB carveout with the 1 KB the
// driver reserves a CTA. The kernel has no static __shared__: 4 bytes more would leave one CTA an
// SM (bench_cuda_serving (b): batch-32 decode 6.04 -> 7.03 ms on the H200). The FP8 layout is 100 KB.
template <int D, bool FP8>
struct PrefillSmem {
  static constexpr int kStages = Pipe<FP8>::kStages;
  static constexpr size_t stage = static_cast<size_t>(kBN) * D * (FP8 ? 1 : 2);  // K or V of one chunk
  static constexpr size_t scales = FP8 ? static_cast<size_t>(kStages) * kBN * sizeof(float) : 0;
  static constexpr size_t q = 0;
  static constexpr size_t vb = 0;  // FP8: the widened V of the chunk computed, over sQ (kBN == kBM)
  static constexpr size_t k = q + static_cast<size_t>(kBM) * D * sizeof(bf16);
  static constexpr size_t v = k + kStages * stage;
  static constexpr size_t ks = v + kStages * stage;
  static constexpr size_t vs = ks + scales;
  static constexpr size_t slot = vs + scales;
  static constexpr size_t bytes = slot + static_cast<size_t>(Pipe<FP8>::kTables) * kBN * sizeof(int32_t);
};
static_assert(kBN == kBM, "sVb takes sQ's place");
static_assert(PrefillSmem<128, false>::bytes == 115712 && PrefillSmem<128, true>::bytes <= 115712,
              "two CTAs an SM at D = 128");

// The tile's MMA and P's packing: bf16, or f16 over an FP8 cache.
template <bool F16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (F16) {
    mma_f16_16816(c, a, b0, b1);
  } else {
    mma_bf16_16816(c, a, b0, b1);
  }
}
template <bool F16>
__device__ __forceinline__ uint32_t pack_p(float lo, float hi) {
  return F16 ? pack_f16x2(lo, hi) : pack_bf16x2(lo, hi);
}

template <int D, bool FP8>
__global__ void __launch_bounds__(kThreads, 2) attention_prefill_kernel(AttentionArgs a) {
  static_assert(D == 64 || D == 128 || (D == 32 && !FP8), "head_dim");
  constexpr int CH = D / 8;  // 16-byte chunks per bf16 row
  using L = PrefillSmem<D, FP8>;
  constexpr int kStages = Pipe<FP8>::kStages, kLookahead = Pipe<FP8>::kLookahead, kTables = Pipe<FP8>::kTables;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw + L::q);
  bf16* sK = reinterpret_cast<bf16*>(smem_raw + L::k);  // bf16 stages, or FP8: codes (uint8)
  bf16* sV = reinterpret_cast<bf16*>(smem_raw + L::v);
  bf16* sVb = reinterpret_cast<bf16*>(smem_raw + L::vb);  // FP8: chunk i's V in f16 (sQ's place)
  float* sKs = reinterpret_cast<float*>(smem_raw + L::ks);  // FP8: [kStages][kBN] scales
  float* sVs = reinterpret_cast<float*>(smem_raw + L::vs);
  int32_t* sSlot = reinterpret_cast<int32_t*>(smem_raw + L::slot);  // [kTables][kBN]

  // The work item, its block-table row, its positions and the first slot tables are metadata
  // (launch.cuh): this chain of dependent loads runs before the wait, while the kernel before (the
  // QKV append) finishes. Q and K/V are read after it.
  const int item = grid_work_item(a.num_items, a.counts);
  if (item < 0) return;
  const AttnWorkItem it = a.items[item];
  const int kvh = grid_kv_head();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_base = a.kv_indptr[it.kv_seq];

  // A narrow tile (at most 16 rows: a decode step's one token x group) gives every warp the same
  // 16 rows and a quarter of each kv chunk (16 entries), merged across warps at the end; a wide
  // one gives warp w rows 16 w .. 16 w + 15 and whole chunks.
  const bool narrow = it.row_end - it.row_begin <= 16;
  const int row_base = narrow ? 0 : warp * 16;
  // This thread's two rows: row_base + g and row_base + g + 8 (fragment rows g and g+8).
  const int g = lane >> 2, t4 = lane & 3;
  int pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pr = it.row_begin + row_base + g + 8 * h;
    pos[h] = pr < it.row_end ? a.positions[it.q_start + pr / group] : -1;
  }
  const int warp_max_pos = __reduce_max_sync(0xffffffffu, max(pos[0], pos[1]));
  // Slot tables (kTables x kBN int32, the cache slot of each entry of a chunk, 0 past kv_end): kept
  // kLookahead chunks ahead of the copies by warps 2-3, so a copy is one shared load and one
  // multiply-add, not a block-table load and a division by block_size per 16 bytes.
  const int n_chunks = (it.kv_end - it.kv_begin + kBN - 1) / kBN;
  const int tt = tid - (kThreads - kBN);  // this thread's table entry (warps 2-3), or < 0
  // Facts read in place (bf16 only): entries [fa, fb) are pool slots fact_slots[f0 + j - fa],
  // kept in the tables as -1 - slot.
  int fa = 0, fb = 0, f0 = 0;
  if (!FP8 && a.fact_indptr != nullptr) {
    f0 = a.fact_indptr[it.kv_seq];
    fa = a.fact_start[it.kv_seq];
    fb = fa + a.fact_indptr[it.kv_seq + 1] - f0;
  }
  auto slot_of = [&](int c, int t) {
    const int j = it.kv_begin + c * kBN + t;
    if (j >= it.kv_end) return 0;
    if (j >= fa && j < fb) return -1 - a.fact_slots[f0 + j - fa];
    return a.kv_indices[kv_base + j / a.block_size] * a.block_size + j % a.block_size;
  };
  if (tt >= 0) {
#pragma unroll
    for (int c = 0; c < kLookahead; ++c) sSlot[c * kBN + tt] = c < n_chunks ? slot_of(c, tt) : 0;
  }
  // Register stage of the table pipeline: the slot of chunk kLookahead, stored next iteration.
  int next_slot = tt >= 0 && kLookahead < n_chunks ? slot_of(kLookahead, tt) : 0;
  pdl_begin();
  __syncthreads();  // the first tables

  // This thread copies 16-byte column `ch` of rows r0 + p * kRowsPerPass of each chunk; the
  // passes share the swizzle (kRowsPerPass is a multiple of 8).
  // (FP8: 16-byte chunks of D codes, CH8 a row, and each entry's two scales.)
  constexpr int CH8 = D / 16;
  constexpr int kChunksPerRow = FP8 ? CH8 : CH;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRowsPerPass % 8 == 0 && kBN % kRowsPerPass == 0 && kThreads == 2 * kBN, "copy passes");
  const int r0 = tid / kChunksPerRow, ch = tid % kChunksPerRow;
  const int smem_off = FP8 ? swz8<D>(r0, ch) : static_cast<int>(swz<D>(r0, ch) * sizeof(bf16));  // bytes
  const size_t elem = FP8 ? 1 : sizeof(bf16);
  const unsigned char* k_base =
      static_cast<const unsigned char*>(a.cache.k) + (static_cast<size_t>(kvh) * D + ch * (16 / elem)) * elem;
  const unsigned char* v_base =
      static_cast<const unsigned char*>(a.cache.v) + (static_cast<size_t>(kvh) * D + ch * (16 / elem)) * elem;
  const size_t col = (static_cast<size_t>(kvh) * D + ch * (16 / elem)) * elem;  // the same column in the pool
  const unsigned char* kp_base = a.pool.k == nullptr ? k_base : static_cast<const unsigned char*>(a.pool.k) + col;
  const unsigned char* vp_base = a.pool.v == nullptr ? v_base : static_cast<const unsigned char*>(a.pool.v) + col;
  const uint32_t slot_stride = static_cast<uint32_t>(a.num_kv_heads * D * elem);  // bytes
  // Chunk c into stage c % kStages; rows past kv_end are zero-filled (their table entry is slot 0,
  // never read), their scales too.
  auto load_kv = [&](int c) {
    const int32_t* tbl = sSlot + (c % kTables) * kBN;
    unsigned char* k_dst = reinterpret_cast<unsigned char*>(sK) + (c % kStages) * L::stage + smem_off;
    unsigned char* v_dst = reinterpret_cast<unsigned char*>(sV) + (c % kStages) * L::stage + smem_off;
    const int chunk_rows = it.kv_end - (it.kv_begin + c * kBN);
    const int rows_left = chunk_rows - r0;
#pragma unroll
    for (int p = 0; p < kBN / kRowsPerPass; ++p) {
      const int32_t e = tbl[r0 + p * kRowsPerPass];
      const bool pooled = !FP8 && e < 0;  // a fact read in place
      const size_t off = static_cast<size_t>(static_cast<uint32_t>(pooled ? -1 - e : e)) * slot_stride;
      const bool valid = p * kRowsPerPass < rows_left;
      cp_async_16(k_dst + p * kRowsPerPass * D * elem, (pooled ? kp_base : k_base) + off, valid);
      cp_async_16(v_dst + p * kRowsPerPass * D * elem, (pooled ? vp_base : v_base) + off, valid);
    }
    if constexpr (FP8) {  // thread t: the K (t < kBN) or V scale of entry t % kBN
      const int e = tid % kBN;
      const float* src = (tid < kBN ? a.cache.k_scale : a.cache.v_scale) +
                         static_cast<int64_t>(static_cast<uint32_t>(tbl[e])) * a.num_kv_heads + kvh;
      cp_async_4((tid < kBN ? sKs : sVs) + (c % kStages) * kBN + e, src, e < chunk_rows);
    }
  };

  // Q tile (rows past row_end are zero and fully masked below), with the first chunk: group 0;
  // chunks 1 .. kStages - 2: one group each (a group is committed every step, empty or not, so
  // that wait<kStages - 2> always means "chunk i has landed").
  for (int c = tid; c < kBM * CH; c += kThreads) {
    const int r = c / CH, cc = c % CH, pr = it.row_begin + r;
    const bool valid = pr < it.row_end;
    const bf16* src = a.q;
    if (valid) {
      const int64_t tok = it.q_start + pr / group;
      const int head = kvh * group + pr % group;
      src = a.q + (tok * a.num_heads + head) * D + cc * 8;
    }
    cp_async_16(sQ + swz<D>(r, cc), src, valid);
  }
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) {
    if (c < n_chunks) load_kv(c);
    cp_async_commit();
  }

  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale_log2 = a.scale * kLog2e;

  // One chunk's S = Q K^T, online softmax and O += P V over NT n-tiles of 8 kv entries from n-tile
  // nt0 (wide: all 8; narrow: this warp's 2), from stage st.
  auto chunk = [&]<int NT>(int st, int cs, int nt0) {
    const bf16* v = FP8 ? sVb : sV + st * kBN * D;
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      const int nb = (nt0 + 2 * np) * 8;  // first kv entry of n-tiles 2np, 2np + 1
      if constexpr (FP8) {
        // Codes: matrices (rows nb.., ks), (nb + 8.., ks), (nb.., ks + 1), (nb + 8.., ks + 1); lane
        // (g, t) gets codes 4t .. 4t + 3 of row g of each (16-byte rows: one ks each).
        const unsigned char* k8 = reinterpret_cast<const unsigned char*>(sK) + st * L::stage;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks += 2) {
          uint32_t w[4];
          ldmatrix_x4(w, k8 + swz8<D>(nb + (lane & 7) + ((lane >> 3) & 1) * 8, ks + (lane >> 4)));
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t b0, b1;
            e4m3x4_to_f16x2x2(w[q], b0, b1);
            mma_f16_16816(s[2 * np + (q & 1)], qf[ks + (q >> 1)], b0, b1);
          }
        }
      } else {
        const bf16* k = sK + st * kBN * D;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          uint32_t b[4];  // b[0], b[1]: n-tile 2np; b[2], b[3]: n-tile 2np + 1
          ldmatrix_x4(b, k + swz<D>(nb + (lane & 7) + (lane >> 4) * 8, ks * 2 + ((lane >> 3) & 1)));
          mma_bf16_16816(s[2 * np], qf[ks], b[0], b[1]);
          mma_bf16_16816(s[2 * np + 1], qf[ks], b[2], b[3]);
        }
      }
    }

    // Scale, mask, row max (a row's values live in the 4 lanes of a quad). FP8: each entry's score
    // times its K scale.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int jc = (nt0 + nt) * 8 + 2 * t4;  // this lane's first column of the n-tile
      float2 kscale = make_float2(1.0f, 1.0f);
      if constexpr (FP8) kscale = *reinterpret_cast<const float2*>(sKs + st * kBN + jc);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = cs + jc + (e & 1);
        const int h = e >> 1;
        const float sl = FP8 ? scale_log2 * ((e & 1) ? kscale.y : kscale.x) : scale_log2;
        const float val = (j <= pos[h] && j < it.kv_end) ? s[nt][e] * sl : -INFINITY;
        s[nt][e] = val;
        mx[h] = fmaxf(mx[h], val);
      }
    }
    float alpha[2], base[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m[h], mx[h]);
      // All masked so far: keep o = 0, l = 0 (exp2 of -inf - -inf would be NaN).
      alpha[h] = m_new == -INFINITY ? 1.0f : exp2_ftz(m[h] - m_new);
      base[h] = m_new == -INFINITY ? 0.0f : m_new;
      m[h] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2_ftz(s[nt][e] - base[e >> 1]);
        s[nt][e] = p;
        sum[e >> 1] += p;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + sum[h];  // lane-partial; quad-summed at the end
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

    // O += P V: P's C layout of n-tiles (2kk, 2kk+1) is the A layout of k-step kk.
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      const uint32_t pa[4] = {pack_p<FP8>(s[2 * kk][0], s[2 * kk][1]), pack_p<FP8>(s[2 * kk][2], s[2 * kk][3]),
                              pack_p<FP8>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_p<FP8>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int vrow = (nt0 + 2 * kk) * 8 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];  // b[0], b[1]: d-tile 2dp; b[2], b[3]: d-tile 2dp + 1
        ldmatrix_x4_trans(b, v + swz<D>(vrow, dp * 2 + (lane >> 4)));
        mma_16816<FP8>(o[2 * dp], pa, b[0], b[1]);
        mma_16816<FP8>(o[2 * dp + 1], pa, b[2], b[3]);
      }
    }
  };

  for (int i = 0; i < n_chunks; ++i) {
    const int cs = it.kv_begin + i * kBN;
    cp_async_wait<kStages - 2>();  // this thread's copies of chunk i (and Q) have landed
    // Every thread's copies of chunk i are visible; every warp is done with chunk i - 1, so its
    // stage takes chunk i + kStages - 1; the tables written last step are visible.
    __syncthreads();
    if (i + kStages - 1 < n_chunks) load_kv(i + kStages - 1);
    cp_async_commit();
    if (tt >= 0) {  // table of chunk i + kLookahead (its buffer's last reader was chunk i + kLookahead - kTables)
      sSlot[((i + kLookahead) % kTables) * kBN + tt] = next_slot;
      next_slot = i + kLookahead + 1 < n_chunks ? slot_of(i + kLookahead + 1, tt) : 0;
    }
    if constexpr (!FP8) {
      if (cs < fb && cs + kBN > fa) {  // chunk i holds facts read in place: their keys, rotated
        rotate_fact_keys<D, kBN, kThreads>(sK + (i % kStages) * kBN * D, cs, max(fa, cs), min(fb, it.kv_end), a, tid);
        __syncthreads();
      }
    }
    if (i == 0) {  // Q's fragments (FP8: f16, d permuted as the K codes arrive, see above)
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        if constexpr (FP8) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint2 qv =
                *reinterpret_cast<const uint2*>(sQ + swz<D>(row_base + g + 8 * h, 2 * ks + (t4 >> 1)) + 4 * (t4 & 1));
            qf[ks][h] = bf16x2_to_f16x2(qv.x);      // a0 / a1: d = 4t, 4t + 1 of rows g / g + 8
            qf[ks][2 + h] = bf16x2_to_f16x2(qv.y);  // a2 / a3: d = 4t + 2, 4t + 3
          }
        } else {
          const int row = row_base + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4(qf[ks], sQ + swz<D>(row, ks * 2 + (lane >> 4)));
        }
      }
      if constexpr (FP8) __syncthreads();  // sQ becomes sVb
    }
    if constexpr (FP8) {
      // Chunk i's V codes x scales -> sVb (its readers, chunk i - 1, are done): a wide tile's warps
      // share every row (all threads, then a barrier); a narrow tile's warp w reads only rows
      // 16 w .. 16 w + 15, which it widens itself.
      const int row = narrow ? warp * 16 + (lane & 15) : tid % kBN;
      const int half_id = narrow ? lane >> 4 : tid / kBN;
      const int st = i % kStages;
      const unsigned char* src = reinterpret_cast<const unsigned char*>(sV) + st * L::stage;
      const __half2 sc = e4m3_f16_scale(sVs[st * kBN + row]);
#pragma unroll
      for (int cc = 0; cc < CH8 / 2; ++cc) {
        const int c8 = half_id * (CH8 / 2) + cc;
        uint4 lo, hi;
        e4m3x16_to_f16(*reinterpret_cast<const uint4*>(src + swz8<D>(row, c8)), sc, lo, hi);
        *reinterpret_cast<uint4*>(sVb + swz<D>(row, 2 * c8)) = lo;
        *reinterpret_cast<uint4*>(sVb + swz<D>(row, 2 * c8 + 1)) = hi;
      }
      if (narrow) {
        __syncwarp();
      } else {
        __syncthreads();
      }
    }
    if (cs <= warp_max_pos) {  // otherwise every row of this warp is masked for the chunk
      const int st = i % kStages;
      if (narrow) {
        chunk.template operator()<2>(st, cs, 2 * warp);
      } else {
        chunk.template operator()<kBN / 8>(st, cs, 0);
      }
    }
  }
  cp_async_wait<0>();  // nothing in flight when the CTA exits (an empty kv range loads only Q)

  // Epilogue: quad-sum l, normalise, write the final output (bf16) or a partial (f32 + lse).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  if (narrow) {
    // Four warps' (m, l, o) of the same 16 rows, over their quarters of the kv range: through the
    // stage buffers (free now), combined by every thread for one row and D / 8 columns.
    float* sO = reinterpret_cast<float*>(smem_raw + L::k);  // [4 warps][16 rows][D]
    float* sM = sO + 4 * 16 * D;                             // [4][16]
    float* sL = sM + 4 * 16;
    static_assert(4 * 16 * (D + 2) * sizeof(float) <= 2 * kStages * L::stage, "merge scratch in the stages");
    __syncthreads();  // every warp is done with the stages
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g + 8 * h;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<float2*>(sO + (warp * 16 + r) * D + dt * 8 + 2 * t4) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
      if (t4 == 0) {
        sM[warp * 16 + r] = m[h];
        sL[warp * 16 + r] = l[h];
      }
    }
    __syncthreads();
    const int r = tid >> 3, c0 = (tid & 7) * (D / 8);
    const int pr = it.row_begin + r;
    if (pr >= it.row_end) return;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) mm = fmaxf(mm, sM[w * 16 + r]);
    float wt[4], ll = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float mw = sM[w * 16 + r];
      wt[w] = mw == -INFINITY ? 0.0f : exp2f(mw - mm);
      ll += wt[w] * sL[w * 16 + r];
    }
    const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
    float val[D / 8];
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      float acc = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) acc += wt[w] * sO[(w * 16 + r) * D + c0 + c];
      val[c] = acc * inv;
    }
    if (it.partial < 0) {
      const int64_t tok = it.q_start + pr / group;
      const int head = kvh * group + pr % group;
      bf16* dst = a.out + (tok * a.num_heads + head) * D + c0;
#pragma unroll
      for (int c = 0; c < D / 8; c += 2)
        *reinterpret_cast<__nv_bfloat162*>(dst + c) = __floats2bfloat162_rn(val[c], val[c + 1]);
    } else {
      const int64_t prow = (static_cast<int64_t>(it.partial) * a.num_kv_heads + kvh) * a.rows_per_tile + r;
      float* dst = a.partial_o + prow * D + c0;
#pragma unroll
      for (int c = 0; c < D / 8; c += 2) *reinterpret_cast<float2*>(dst + c) = make_float2(val[c], val[c + 1]);
      if ((tid & 7) == 0) a.partial_lse[prow] = ll > 0.0f ? mm + log2f(ll) : -INFINITY;
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    const int pr = it.row_begin + r;
    if (pr >= it.row_end) continue;
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    if (it.partial < 0) {
      const int64_t tok = it.q_start + pr / group;
      const int head = kvh * group + pr % group;
      bf16* dst = a.out + (tok * a.num_heads + head) * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8 + 2 * t4) =
            __floats2bfloat162_rn(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
      }
    } else {
      const int64_t prow = (static_cast<int64_t>(it.partial) * a.num_kv_heads + kvh) * a.rows_per_tile + r;
      float* dst = a.partial_o + prow * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<float2*>(dst + dt * 8 + 2 * t4) = make_float2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
      if (t4 == 0) a.partial_lse[prow] = l[h] > 0.0f ? m[h] + log2f(l[h]) : -INFINITY;
    }
  }
}

template <int D, bool FP8>
void launch_prefill(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = PrefillSmem<D, FP8>::bytes;
  static bool configured = false;  // the attribute is per function; set it once
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<D, FP8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    // Two CTAs an SM need the whole 228 KB carveout at D = 128 (2 x (113 KB + 1 KB reserved)).
    CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<D, FP8>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
    configured = true;
  }
  launch(attention_prefill_kernel<D, FP8>, work_item_grid(a.num_items, a.num_kv_heads), dim3(kThreads), smem, stream, a);
}

}  // namespace

bool attention_supports_head_dim(int32_t head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }
bool decode_kernel_supports_head_dim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }
bool fp8_cache_supports_head_dim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

void attention_prefill(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_items == 0) return;
  KERNEL_REQUIRE(a.rows_per_tile == kBM, "attention_prefill: plan with kPrefillRowsPerTile rows per tile");
  KERNEL_REQUIRE(a.num_heads % a.num_kv_heads == 0, "attention_prefill: heads not divisible by kv heads");
  KERNEL_REQUIRE(!a.cache.fp8 || fp8_cache_supports_head_dim(a.head_dim), "attention_prefill: an FP8 cache needs head_dim 64 or 128");
  switch (a.head_dim) {
    case 32: launch_prefill<32, false>(a, stream); break;  // encoders (all-MiniLM-L6-v2)
    case 64: a.cache.fp8 ? launch_prefill<64, true>(a, stream) : launch_prefill<64, false>(a, stream); break;
    case 128: a.cache.fp8 ? launch_prefill<128, true>(a, stream) : launch_prefill<128, false>(a, stream); break;
    default: KERNEL_REQUIRE(false, "attention_prefill: head_dim must be 32, 64 or 128");
  }
}

}  // namespace inferscale::cuda
