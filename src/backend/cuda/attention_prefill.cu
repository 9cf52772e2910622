// Paged attention on tensor cores (FlashAttention-2 style), causal by position, GQA-packed rows.
//
// CTA = one work item (attention_plan.h) x one kv head (grid.y); 4 warps, 16 packed rows each:
//
//   sQ [64 rows][D]      rows = packed (token, query head of this kv head)
//   sK [2][64 kv][D]     double-buffered kv chunks, gathered through the block table by cp.async
//   sV [2][64 kv][D]
//
// Per chunk, per warp: S = Q K^T (16 x 64, f32 in registers) -> mask (kv j > position of the
// row's token, or j >= kv_end) -> online softmax in the log2 domain -> O += P V with P rounded
// to bf16 as the A operand. Shared tiles are XOR-swizzled by 16-byte chunk
// (chunk' = chunk ^ (row % 8)) so that ldmatrix's 8 row addresses hit distinct banks.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kBM = kPrefillRowsPerTile;  // 64 packed rows per CTA
constexpr int kBN = kPrefillKvChunk;      // 64 kv entries per chunk
constexpr int kThreads = 128;             // 4 warps x 16 rows
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr size_t prefill_smem_bytes() {
  return static_cast<size_t>(kBM + 4 * kBN) * D * sizeof(bf16);
}

// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] bf16 tile.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

template <int D>
__global__ void __launch_bounds__(kThreads, 2) attention_prefill_kernel(AttentionArgs a) {
  static_assert(D % 16 == 0 && D <= 256, "head_dim");
  constexpr int CH = D / 8;  // 16-byte chunks per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + kBM * D;
  bf16* sV = sK + 2 * kBN * D;

  // The work item, its block-table row and its positions are metadata (launch.cuh): this chain of
  // dependent loads runs before the wait, while the kernel before (the QKV append) finishes; the
  // first chunk's block-table entries are prefetched into L1. Q and K/V are read after it.
  if (a.counts != nullptr && static_cast<int>(blockIdx.x) >= a.counts[0]) return;
  const AttnWorkItem it = a.items[blockIdx.x];
  const int kvh = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_base = a.kv_indptr[it.kv_seq];
  if (tid * a.block_size < kBN + a.block_size) {
    const int j = it.kv_begin + tid * a.block_size;
    if (j < it.kv_end) asm volatile("prefetch.global.L1 [%0];" ::"l"(a.kv_indices + kv_base + j / a.block_size));
  }

  // This thread's two rows: r0 = warp*16 + g and r0 + 8 (fragment rows g and g+8).
  const int g = lane >> 2, t4 = lane & 3;
  int pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pr = it.row_begin + warp * 16 + g + 8 * h;
    pos[h] = pr < it.row_end ? a.positions[it.q_start + pr / group] : -1;
  }
  const int warp_max_pos = __reduce_max_sync(0xffffffffu, max(pos[0], pos[1]));
  pdl_begin();

  // Q tile (rows past row_end are zero and fully masked below).
  for (int c = tid; c < kBM * CH; c += kThreads) {
    const int r = c / CH, ch = c % CH, pr = it.row_begin + r;
    const bool valid = pr < it.row_end;
    const bf16* src = a.q;
    if (valid) {
      const int64_t tok = it.q_start + pr / group;
      const int head = kvh * group + pr % group;
      src = a.q + (tok * a.num_heads + head) * D + ch * 8;
    }
    cp_async_16(sQ + swz<D>(r, ch), src, valid);
  }

  // One kv chunk [start, start + kBN) into buffer `buf`; entries >= kv_end are zero-filled.
  auto load_kv = [&](int start, int buf) {
    bf16* k_dst = sK + buf * kBN * D;
    bf16* v_dst = sV + buf * kBN * D;
    for (int c = tid; c < kBN * CH; c += kThreads) {
      const int r = c / CH, ch = c % CH, j = start + r;
      const bool valid = j < it.kv_end;
      const bf16* ks = a.k_cache;
      const bf16* vs = a.v_cache;
      if (valid) {
        const int64_t slot =
            static_cast<int64_t>(a.kv_indices[kv_base + j / a.block_size]) * a.block_size + j % a.block_size;
        const int64_t off = (slot * a.num_kv_heads + kvh) * D + ch * 8;
        ks += off;
        vs += off;
      }
      cp_async_16(k_dst + swz<D>(r, ch), ks, valid);
      cp_async_16(v_dst + swz<D>(r, ch), vs, valid);
    }
  };

  const int n_chunks = (it.kv_end - it.kv_begin + kBN - 1) / kBN;
  load_kv(it.kv_begin, 0);
  cp_async_commit();  // group 0: Q and the first chunk

  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale_log2 = a.scale * kLog2e;

  for (int i = 0; i < n_chunks; ++i) {
    const int cs = it.kv_begin + i * kBN;
    if (i + 1 < n_chunks) {
      load_kv(cs + kBN, (i + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // chunk i (and Q) visible to every warp
    if (i == 0) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(qf[ks], sQ + swz<D>(row, ks * 2 + (lane >> 4)));
      }
    }
    if (cs <= warp_max_pos) {  // otherwise every row of this warp is masked for the chunk
      const bf16* k = sK + (i & 1) * kBN * D;
      const bf16* v = sV + (i & 1) * kBN * D;

      // S = Q K^T: 8 n-tiles of 8 kv entries.
      float s[kBN / 8][4];
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
        for (int np = 0; np < kBN / 16; ++np) {
          uint32_t b[4];  // b[0], b[1]: n-tile 2np; b[2], b[3]: n-tile 2np + 1
          const int row = np * 16 + (lane & 7) + (lane >> 4) * 8;
          ldmatrix_x4(b, k + swz<D>(row, ks * 2 + ((lane >> 3) & 1)));
          mma_bf16_16816(s[2 * np], qf[ks], b[0], b[1]);
          mma_bf16_16816(s[2 * np + 1], qf[ks], b[2], b[3]);
        }
      }

      // Scale, mask, row max (a row's 64 values live in the 4 lanes of a quad).
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = cs + nt * 8 + 2 * t4 + (e & 1);
          const int h = e >> 1;
          const float val = (j <= pos[h] && j < it.kv_end) ? s[nt][e] * scale_log2 : -INFINITY;
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
        alpha[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
        base[h] = m_new == -INFINITY ? 0.0f : m_new;
        m[h] = m_new;
      }
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2f(s[nt][e] - base[e >> 1]);
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
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];  // b[0], b[1]: d-tile 2dp; b[2], b[3]: d-tile 2dp + 1
          const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4_trans(b, v + swz<D>(row, dp * 2 + (lane >> 4)));
          mma_bf16_16816(o[2 * dp], pa, b[0], b[1]);
          mma_bf16_16816(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer i & 1 before chunk i + 2 overwrites it
  }

  // Epilogue: quad-sum l, normalise, write the final output (bf16) or a partial (f32 + lse).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
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

template <int D>
void launch_prefill(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = prefill_smem_bytes<D>();
  static bool configured = false;  // the attribute is per function; set it once
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>(a.num_items), static_cast<unsigned>(a.num_kv_heads));
  launch(attention_prefill_kernel<D>, grid, dim3(kThreads), smem, stream, a);
}

}  // namespace

bool attention_supports_head_dim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

void attention_prefill(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_items == 0) return;
  KERNEL_REQUIRE(a.rows_per_tile == kBM, "attention_prefill: plan with kPrefillRowsPerTile rows per tile");
  KERNEL_REQUIRE(a.num_heads % a.num_kv_heads == 0, "attention_prefill: heads not divisible by kv heads");
  switch (a.head_dim) {
    case 64: launch_prefill<64>(a, stream); break;
    case 128: launch_prefill<128>(a, stream); break;
    default: KERNEL_REQUIRE(false, "attention_prefill: head_dim must be 64 or 128");
  }
}

}  // namespace inferscale::cuda
