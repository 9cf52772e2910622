// What the attention kernels share (attention_prefill.cu, attention_decode.cu,
// attention_decode_mma.cu): the log2 domain of their softmax, and the shared-memory tile
// addressing: rows of K / V / Q, XOR-swizzled by 16-byte chunk so that ldmatrix's 8 row addresses
// (8 consecutive rows, one chunk) fall in 8 distinct bank groups.
#pragma once

namespace inferscale::cuda {

// Scores are taken times scale * log2(e), so that exp2 gives the softmax.
constexpr float kLog2e = 1.4426950408889634f;

// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] bf16 tile (chunk' = chunk ^ (row % 8)).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
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
