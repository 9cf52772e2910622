// What the attention kernels share (attention_prefill.cu, attention_decode_mma.cu): their grid
// over work items and kv heads, the log2 domain of their softmax, and the shared-memory tile
// addressing: rows of K / V / Q, XOR-swizzled by 16-byte chunk so that ldmatrix's 8 row addresses
// (8 consecutive rows, one chunk) fall in 8 distinct bank groups.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"

namespace inferscale::cuda {

// The grid of a kernel that runs a plan's work items: CTA = (kv head, work item), kv heads the
// fastest dimension (x), items over y (and z past grid.y's 65,535). An item's heads are then
// scheduled side by side: they read the interleaved heads of the same cache blocks at about the same
// time, and the plan's longest items (it puts them first) take the first CTA of every SM while its
// shortest fill the second. Items fastest measured slower on the H200 (bench_cuda_kernels --attention):
// bf16 prefill of 1,532 tokens 0.114-0.116 against 0.099-0.100 ms, FP8 0.132-0.133 against 0.112;
// FP8 decode kernel at 100 x 2,800 0.162-0.163 against 0.157-0.158.
inline dim3 work_item_grid(int32_t num_items, int32_t num_kv_heads) {
  const int32_t y = num_items < 1 ? 1 : num_items < 65535 ? num_items : 65535;
  return dim3(static_cast<unsigned>(num_kv_heads), static_cast<unsigned>(y), static_cast<unsigned>((num_items + y - 1) / y));
}
// The CTA's work item, or -1 past the plan's last (the grid's last z slice rounds up; a CUDA
// graph's launch covers the plan's capacity and `counts` (AttentionArgs) holds its items).
__device__ __forceinline__ int grid_work_item(int32_t num_items, const int32_t* counts) {
  const int item = static_cast<int>(blockIdx.z * gridDim.y + blockIdx.y);
  return item < num_items && (counts == nullptr || item < counts[0]) ? item : -1;
}
__device__ __forceinline__ int grid_kv_head() { return static_cast<int>(blockIdx.x); }

// Scores are taken times scale * log2(e), so that exp2 gives the softmax.
constexpr float kLog2e = 1.4426950408889634f;

// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] bf16 tile: chunk' = chunk ^ (row
// % 8) for rows of 8 or 16 chunks (D = 64, 128). At D = 32 a row is 4 chunks, two rows share a
// 128-byte line: chunk' = chunk ^ ((row / 2) % 4), so 8 consecutive rows' chunk c still fall in
// 8 distinct 16-byte bank groups ((row % 2) picks the half-line, chunk' the group in it).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  if constexpr (D == 32) return row * D + ((chunk ^ ((row >> 1) & 3)) << 3);
  return row * D + ((chunk ^ (row & 7)) << 3);
}
// Byte offset of (row, 16-byte chunk) in a swizzled [rows][D] uint8 tile (FP8 codes): 8
// consecutive rows' chunk c fall in 8 distinct 16-byte bank groups (rows are 128 or 64 bytes; the
// pattern repeats every 8 rows).
template <int D>
__device__ __forceinline__ int swz8(int row, int chunk) {
  return row * D + ((chunk ^ (D == 128 ? (row & 7) : ((row >> 1) & 3))) << 4);
}

// Facts read in place (AttentionArgs::fact_*): the keys of entries [from, to) of a bf16 K tile of
// kRows swizzled rows holding entries first .. first + kRows - 1, pre-RoPE rows from the pool,
// rotated at their positions (an entry's index is its position) in place: bf16 -> f32, rope_pair
// with the table's angles, rounded to bf16, as injection stores them. The kN threads t share the
// tile in units of 8 pairs (half-split RoPE: 16-byte chunk c of each half; interleaved: chunks 2c
// and 2c + 1), so a thread issues all its units' 16-byte loads (the K chunks, the angles as
// float4) before it computes; the caller synchronizes before and after.
template <int D, int kRows, int kN>
__device__ __forceinline__ void rotate_fact_keys(__nv_bfloat16* k, int first, int from, int to, const AttentionArgs& a, int t) {
  constexpr int half = D / 2, kUnitsPerRow = half / 8, kUnits = kRows * kUnitsPerRow;
  static_assert(kUnits % kN == 0, "whole units a thread");
#pragma unroll
  for (int n = 0; n < kUnits / kN; ++n) {
    const int u = t + n * kN, row = u / kUnitsPerRow, c = u % kUnitsPerRow, j = first + row;
    if (j < from || j >= to) continue;
    // The unit's two chunks: elements d0 .. d0 + 7 and d1 .. d1 + 7.
    const int c0 = a.interleaved ? 2 * c : c, c1 = a.interleaved ? 2 * c + 1 : c + kUnitsPerRow;
    Bf16x8* p0 = reinterpret_cast<Bf16x8*>(k + swz<D>(row, c0));
    Bf16x8* p1 = reinterpret_cast<Bf16x8*>(k + swz<D>(row, c1));
    const float4* cp = reinterpret_cast<const float4*>(a.cos_table + static_cast<int64_t>(j) * half + 8 * c);
    const float4* sp = reinterpret_cast<const float4*>(a.sin_table + static_cast<int64_t>(j) * half + 8 * c);
    float cs[8], sn[8], x[16], y[16];
    *reinterpret_cast<float4*>(cs) = cp[0];
    *reinterpret_cast<float4*>(cs + 4) = cp[1];
    *reinterpret_cast<float4*>(sn) = sp[0];
    *reinterpret_cast<float4*>(sn + 4) = sp[1];
    bf16x8_to_f32(*p0, x);
    bf16x8_to_f32(*p1, x + 8);
    if (a.interleaved) {  // pair e = (x[2e], x[2e + 1]) over the two chunks
#pragma unroll
      for (int e = 0; e < 8; ++e) rope_pair(x[2 * e], x[2 * e + 1], cs[e], sn[e], y[2 * e], y[2 * e + 1]);
    } else {  // pair e = (x[e], x[8 + e])
#pragma unroll
      for (int e = 0; e < 8; ++e) rope_pair(x[e], x[8 + e], cs[e], sn[e], y[e], y[8 + e]);
    }
    *p0 = f32_to_bf16x8(y);
    *p1 = f32_to_bf16x8(y + 8);
  }
}

}  // namespace inferscale::cuda
