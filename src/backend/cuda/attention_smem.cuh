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
// kRows swizzled rows holding entries first .. first + kRows - 1, pre-RoPE rows from the pool, are
// rotated at their positions (an entry's index is its position) in place: bf16 -> f32, rope_pair
// with the table's angles, rounded to bf16, as injection stores them. The kN threads t share the
// tile in units of 8 pairs (half-split RoPE: 16-byte chunk c of each half; interleaved: chunks 2c
// and 2c + 1): thread t's units are u = t + n kN, n < kUnits, at row u / kUnitsPerRow, unit
// u % kUnitsPerRow of it.
//
// In two phases, so that the angles' loads (L2 latency: 512 bytes a position, the same for every kv
// head) can be issued a step ahead of their use: load() reads a tile's angles into registers,
// rotate() applies them to the tile once its keys have landed (the caller synchronizes before and
// after). Rows outside [from, to) are neither loaded nor rotated.
template <int D, int kRows, int kN>
struct FactAngles {
  static constexpr int kHalf = D / 2, kUnitsPerRow = kHalf / 8, kUnits = kRows * kUnitsPerRow / kN;
  static_assert(kRows * kUnitsPerRow % kN == 0, "whole units a thread");
  float4 c[kUnits][2], s[kUnits][2];  // unit n: cos / sin of its 8 pairs

  __device__ __forceinline__ static int row(int t, int n) { return (t + n * kN) / kUnitsPerRow; }
  __device__ __forceinline__ static int unit(int t, int n) { return (t + n * kN) % kUnitsPerRow; }

  __device__ __forceinline__ void load(int first, int from, int to, const AttentionArgs& a, int t) {
#pragma unroll
    for (int n = 0; n < kUnits; ++n) {
      const int j = first + row(t, n);
      if (j < from || j >= to) continue;
      const int64_t off = static_cast<int64_t>(j) * kHalf + 8 * unit(t, n);
      const float4* cp = reinterpret_cast<const float4*>(a.cos_table + off);
      const float4* sp = reinterpret_cast<const float4*>(a.sin_table + off);
      c[n][0] = cp[0];
      c[n][1] = cp[1];
      s[n][0] = sp[0];
      s[n][1] = sp[1];
    }
  }

  __device__ __forceinline__ void rotate(__nv_bfloat16* k, int first, int from, int to, bool interleaved, int t) const {
#pragma unroll
    for (int n = 0; n < kUnits; ++n) {
      const int r = row(t, n), u = unit(t, n), j = first + r;
      if (j < from || j >= to) continue;
      // The unit's two chunks: elements d0 .. d0 + 7 and d1 .. d1 + 7.
      const int c0 = interleaved ? 2 * u : u, c1 = interleaved ? 2 * u + 1 : u + kUnitsPerRow;
      Bf16x8* p0 = reinterpret_cast<Bf16x8*>(k + swz<D>(r, c0));
      Bf16x8* p1 = reinterpret_cast<Bf16x8*>(k + swz<D>(r, c1));
      float cs[8], sn[8], x[16], y[16];
      *reinterpret_cast<float4*>(cs) = c[n][0];
      *reinterpret_cast<float4*>(cs + 4) = c[n][1];
      *reinterpret_cast<float4*>(sn) = s[n][0];
      *reinterpret_cast<float4*>(sn + 4) = s[n][1];
      bf16x8_to_f32(*p0, x);
      bf16x8_to_f32(*p1, x + 8);
      if (interleaved) {  // pair e = (x[2e], x[2e + 1]) over the two chunks
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
};

// Both phases at once (the prefill tiles: a chunk's angles are loaded as it is rotated).
template <int D, int kRows, int kN>
__device__ __forceinline__ void rotate_fact_keys(__nv_bfloat16* k, int first, int from, int to, const AttentionArgs& a, int t) {
  FactAngles<D, kRows, kN> ang;
  ang.load(first, from, to, a, t);
  ang.rotate(k, first, from, to, a.interleaved, t);
}

}  // namespace inferscale::cuda
