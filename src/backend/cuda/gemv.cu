// Skinny linear layers (M <= kGemvMaxRows rows of x, the decode steps of a few sequences): one warp
// per output column n streams w's row n once with 16-byte loads and dots it with every row of x.
//   y[m, n] (+)= sum_k x[m, k] w[n, k]     x: [M, K] bf16; w: [N, K] bf16; y: [M, N] f32 or bf16
// and the gated form, one warp per output column over rows n and I + n:
//   out[m, n] = silu(x[m] . w[n]) * (x[m] . w[I + n])     w: [2 I, K] bf16; out: [M, I] bf16
// Weights are read with the streaming hint (each byte once a forward); x (a few KB) stays in L1.
// Launched with PDL (launch.cuh): the first weights are in flight before the input is ready.
// The CPU twins are the f32 GEMM (and SiLU * up) the parity tests compute in double.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kWarps = 4;   // columns per block
constexpr int kInFlight = 4;  // 16-byte weight loads per lane issued before their FMAs
// This form (the first batch loaded before pdl_wait(), the loop peeled by a flag) takes 48
// registers a thread at M = 1; a variant at 32 (more resident blocks, qkv in one wave) and one with
// 8 loads in flight both measured slower in the whole decode step: 5.11 and 5.08 against 4.99 ms
// at batch 1 on the H200 (bench_cuda_serving (b)).

__device__ __forceinline__ void fma8(const uint4& w, const uint4& x, float& acc) {
  const __nv_bfloat162* pw = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* px = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 a = __bfloat1622float2(pw[j]), b = __bfloat1622float2(px[j]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

// Rows = 1: y[m, n] (+)= x[m] . w[n]. Rows = 2 (the gated MLP's gate_up projection, w: [2 N, K]):
// the warp streams rows n and N + n and writes y[m, n] = silu(x[m] . w[n]) * (x[m] . w[N + n]) in
// bf16, so the [M, 2 N] gate_up never exists (and the silu_mul kernel after it goes).
template <int M, int Rows>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                           void* __restrict__ y, bool y_f32, bool accumulate,
                                                           int64_t N, int64_t K) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= N) return;  // before any access: an exit counts as this block's launch_dependents
  const int64_t K8 = K / 8;  // 16-byte chunks of a row
  const uint4* wr[Rows];
#pragma unroll
  for (int r = 0; r < Rows; ++r) wr[r] = reinterpret_cast<const uint4*>(w + (n + r * N) * K);
  const uint4* xr = reinterpret_cast<const uint4*>(x);

  // Before the inputs are ready (launch.cuh): the first batch of weights, into registers. (An L2
  // prefetch of the next 4 KB of the row as well measured slower: batch-1 decode 5.34 against
  // 4.99 ms on the H200, bench_cuda_serving (b).)
  int64_t i = lane;
  uint4 wv[Rows][kInFlight];
  if (i + 32 * (kInFlight - 1) < K8) {
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) wv[r][u] = __ldcs(wr[r] + i + 32 * u);
  }
  pdl_wait();

  float acc[Rows][M];
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  // Batches of kInFlight chunks a lane and row (loaded, then their FMAs). x is read with plain
  // loads: the kernel before wrote it during this kernel's lifetime.
  for (bool first = true; i + 32 * (kInFlight - 1) < K8; i += 32 * kInFlight, first = false) {
    if (!first) {
#pragma unroll
      for (int r = 0; r < Rows; ++r)
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) wv[r][u] = __ldcs(wr[r] + i + 32 * u);
    }
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
#pragma unroll
        for (int m = 0; m < M; ++m) fma8(wv[r][u], xr[m * K8 + i + 32 * u], acc[r][m]);
  }
  for (; i < K8; i += 32) {
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      const uint4 w1 = __ldcs(wr[r] + i);
#pragma unroll
      for (int m = 0; m < M; ++m) fma8(w1, xr[m * K8 + i], acc[r][m]);
    }
  }
  // The next kernel (a small one) may be scheduled now: this block's weight stream is done.
  pdl_launch_dependents();
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if constexpr (Rows == 2) {
      const float g = acc[0][m];
      static_cast<bf16*>(y)[m * N + n] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * acc[1][m]);
    } else if (y_f32) {
      float* out = static_cast<float*>(y) + m * N + n;
      *out = accumulate ? *out + acc[0][m] : acc[0][m];
    } else {
      static_cast<bf16*>(y)[m * N + n] = __float2bfloat16_rn(acc[0][m]);
    }
  }
}

template <int Rows>
void launch_gemv(const bf16* x, const bf16* w, void* y, bool y_f32, bool accumulate, int64_t M, int64_t N, int64_t K,
                 cudaStream_t stream) {
  const int64_t blocks = (N + kWarps - 1) / kWarps;
  KERNEL_REQUIRE(blocks <= 0x7fffffff, "gemv: too many columns");
  const dim3 grid(static_cast<unsigned>(blocks));
  void (*kernel)(const bf16*, const bf16*, void*, bool, bool, int64_t, int64_t) =
      M == 1 ? gemv_kernel<1, Rows> : M == 2 ? gemv_kernel<2, Rows> : M == 3 ? gemv_kernel<3, Rows> : gemv_kernel<4, Rows>;
  launch(kernel, grid, dim3(kWarps * 32), 0, stream, x, w, y, y_f32, accumulate, N, K);
}

}  // namespace

bool gemv_supports(int64_t M, int64_t K, const void* x, const void* w) {
  return M >= 1 && M <= kGemvMaxRows && K > 0 && K % 8 == 0 && is_aligned(x, 16) && is_aligned(w, 16);
}

void gemv(const bf16* x, const bf16* w, void* y, bool y_f32, bool accumulate, int64_t M, int64_t N, int64_t K,
          cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_supports(M, K, x, w), "gemv: M in [1, kGemvMaxRows], K % 8 == 0, 16-byte aligned operands");
  KERNEL_REQUIRE(y_f32 || !accumulate, "gemv: accumulate into f32 outputs only");
  if (N == 0) return;
  launch_gemv<1>(x, w, y, y_f32, accumulate, M, N, K, stream);
}

void gemv_silu_mul(const bf16* x, const bf16* w, bf16* out, int64_t M, int64_t I, int64_t K, cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_supports(M, K, x, w), "gemv_silu_mul: M in [1, kGemvMaxRows], K % 8 == 0, 16-byte aligned operands");
  if (I == 0) return;
  launch_gemv<2>(x, w, out, false, false, M, I, K, stream);
}

}  // namespace inferscale::cuda
