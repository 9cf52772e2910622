// Linear layers of a few rows on the CPU (decode steps of 2-14 sequences): each weight row is
// streamed from memory once and dotted with every row of x, where OpenBLAS' sgemm packs the whole
// weight matrix first (it costs a SmolLM2-135M forward of 2-8 rows 2.5-4.5x one row's on 2 cores;
// bench/bench_cpu_decode.cpp). One
// row stays on OpenBLAS' sgemv, which streams as fast (CpuForwardOps::linear).
//   y[t * ldy + n] = sum_k x[t, k] w[n, k]     x: [T, K], w: [N, K] (rows [n0, n1) computed)
// AVX2 + FMA (+ F16C for the blocks' scales), chosen at run time; without them available() is
// false and callers keep sgemm / sgemv.
// The twin is cpu::linear (sgemm) itself: tests/test_cpu_linear_rows.cpp compares the two.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace inferscale::cpu {

// T at most this: from 16 rows on OpenBLAS' sgemm is as fast (bench_cpu_decode on 2 cores: 1.3-1.9x
// its step at 2-14 rows, 0.87-0.93x at 16).
inline constexpr int64_t kLinearRowsMax = 14;

// True when this CPU runs the kernels (AVX2, FMA and F16C).
bool linear_rows_available();

// Rows [n0, n1) of w against the T rows of x (1 <= T <= kLinearRowsMax), into y's columns n0..n1-1.
// Sums in f32 over 8 lanes, in a fixed order per (t, n): a row's result does not depend on T.
void linear_rows(const float* x, int64_t T, int64_t K, const float* w, int64_t n0, int64_t n1, float* y, int64_t ldy);

// The same over a matrix kept in GGML blocks (a GGUF's own bytes, 5-6x fewer than f32): Q4_1 and
// Q8_0 (the types of SmolLM2's GGUF), for 1 <= T <= kLinearRowsMax. w holds N rows of K / 32
// blocks. A block's 32 products are summed as d * sum(q x) (+ m * sum(x) for Q4_1), so results
// differ from the f32 product with the dequantized weights by rounding only.
bool linear_rows_quant_supported(DType t);
// CpuForwardOps reads the blocks for at most this many rows: past it the unpacking makes the kernel
// compute-bound, and the f32 rows are as fast (bench_cpu_decode: 1.1-1.3x the f32 step at 1-2
// rows, even at 4, 0.94-0.95x at 8-12).
inline constexpr int64_t kQuantRowsMax = 4;
// sums[t * K / 32 + b] = the sum of x[t]'s block b (T rows of K values): what a Q4_1 block's
// minimum multiplies, computed once a linear for every weight row.
void block_sums(const float* x, int64_t T, int64_t K, float* sums);
// xsum: block_sums(x) for Q4_1 (unused for Q8_0).
void linear_rows_quant(const float* x, const float* xsum, int64_t T, int64_t K, const void* w, DType t, int64_t n0,
                       int64_t n1, float* y, int64_t ldy);

}  // namespace inferscale::cpu
