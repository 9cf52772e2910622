// Linear layers of a few rows on the CPU (decode steps of 2-14 sequences): each weight row is
// streamed from memory once and dotted with every row of x, where OpenBLAS' sgemm packs the whole
// weight matrix first (it costs a SmolLM2-135M forward of 2-8 rows 2.5-4.5x one row's on 2 cores;
// docs/BENCHMARKS.md "Linear layers of a few rows on the CPU", bench/bench_cpu_decode.cpp). One
// row stays on OpenBLAS' sgemv, which streams as fast (CpuForwardOps::linear).
//   y[t * ldy + n] = sum_k x[t, k] w[n, k]     x: [T, K], w: [N, K] (rows [n0, n1) computed)
// AVX2 + FMA, chosen at run time; without them available() is false and callers keep sgemm/sgemv.
// The twin is cpu::linear (sgemm) itself: tests/test_cpu_linear_rows.cpp compares the two.
#pragma once
#include <cstdint>

namespace inferscale::cpu {

// T at most this: from 16 rows on OpenBLAS' sgemm is as fast (bench_cpu_decode on 2 cores: 1.3-1.9x
// its step at 2-14 rows, 0.87-0.93x at 16).
inline constexpr int64_t kLinearRowsMax = 14;

// True when this CPU runs the kernel (AVX2 and FMA).
bool linear_rows_available();

// Rows [n0, n1) of w against the T rows of x (1 <= T <= kLinearRowsMax), into y's columns n0..n1-1.
// Sums in f32 over 8 lanes, in a fixed order per (t, n): a row's result does not depend on T.
void linear_rows(const float* x, int64_t T, int64_t K, const float* w, int64_t n0, int64_t n1, float* y, int64_t ldy);

}  // namespace inferscale::cpu
