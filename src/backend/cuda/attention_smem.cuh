// What the attention kernels share (attention_prefill.cu, attention_decode_mma.cu): their grid
// over work items and kv heads, the log2 domain of their softmax, and the shared-memory tile
// addressing: rows of K / V / Q, XOR-swizzled by 16-byte chunk so that ldmatrix's 8 row addresses
// (8 consecutive rows, one chunk) fall in 8 distinct bank groups.
#pragma once
#include <cstdint>

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

}  // namespace inferscale::cuda
