// Skinny linear layers (M <= kGemvMaxRows rows of x, the decode steps of a few sequences): one warp
// per output column n streams w's row n once with 16-byte loads and dots it with every row of x.
//   y[m, n] (+)= sum_k x[m, k] w[n, k]     x: [M, K] bf16; w: [N, K] bf16; y: [M, N] f32 or bf16
// and the gated form, one warp per output column over rows n and I + n:
//   out[m, n] = silu(x[m] . w[n]) * (x[m] . w[I + n])     w: [2 I, K] bf16; out: [M, I] bf16
// With FP8 weights (--quantization fp8: E4M3 codes and one f32 scale for the matrix, W8A16) a
// 16-byte load brings 16 codes, widened exactly to f16 and then f32 beside x's bf16, and the sums
// are times the scale at the end: half the bytes of bf16 weights for the same dot products.
// Weights are read with the streaming hint (each byte once a forward); x (a few KB) stays in L1.
// Launched with PDL (launch.cuh): the first weights are in flight before the input is ready.
// The CPU twins are the f32 GEMM (and SiLU * up) the parity tests compute in double.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kWarps = 4;   // columns per block
constexpr int kInFlight = 4;  // 16-byte weight loads per lane issued before their FMAs
// This form (the first batch loaded before pdl_wait(), the loop peeled by a flag) takes 48
// registers a thread at M = 1; a variant at 32 (more resident blocks, qkv in one wave) and one with
// 8 loads in flight both measured slower in the whole decode step: 5.11 and 5.08 against 4.99 ms
// at batch 1 on the H200 (docs/BENCHMARKS.md run 14).

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

// Sixteen codes (one 16-byte load) against 16 bf16 values of x (two loads): acc += sum w[j] x[j].
__device__ __forceinline__ void fma16_e4m3(const uint4& w, const uint4& x0, const uint4& x1, float& acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const __nv_bfloat162* px0 = reinterpret_cast<const __nv_bfloat162*>(&x0);
  const __nv_bfloat162* px1 = reinterpret_cast<const __nv_bfloat162*>(&x1);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t h[2];
    e4m3x4_to_f16x2x2(ws[q], h[0], h[1]);  // elements 4q, 4q + 1 | 4q + 2, 4q + 3
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int pair = 2 * q + e;
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h[e]));
      const float2 b = __bfloat1622float2(pair < 4 ? px0[pair] : px1[pair - 4]);
      acc = fmaf(a.x, b.x, acc);
      acc = fmaf(a.y, b.y, acc);
    }
  }
}

// One 16-byte chunk i of a weight row against row m of x (K8: x's row in 16-byte words): 8 bf16
// weights, or 16 E4M3 codes.
template <bool Fp8>
__device__ __forceinline__ void fma_chunk(const uint4& w, const uint4* xr, int64_t m, int64_t K8, int64_t i, float& acc) {
  if constexpr (Fp8) {
    fma16_e4m3(w, xr[m * K8 + 2 * i], xr[m * K8 + 2 * i + 1], acc);
  } else {
    fma8(w, xr[m * K8 + i], acc);
  }
}

// Rows = 1: y[m, n] (+)= x[m] . w[n]. Rows = 2 (the gated MLP's gate_up projection, w: [2 N, K]):
// the warp streams rows n and N + n and writes y[m, n] = silu(x[m] . w[n]) * (x[m] . w[N + n]) in
// bf16, so the [M, 2 N] gate_up never exists (and the silu_mul kernel after it goes).
// Fp8: w holds E4M3 codes and *w_scale their scale.
template <int M, int Rows, bool Fp8>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const bf16* __restrict__ x, const void* __restrict__ w,
                                                           const float* __restrict__ w_scale, void* __restrict__ y,
                                                           bool y_f32, bool accumulate, int64_t N, int64_t K) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= N) return;  // before any access: an exit counts as this block's launch_dependents
  constexpr int kElemBytes = Fp8 ? 1 : 2;
  const int64_t K8 = K / 8;                           // 16-byte words of a row of x
  const int64_t Kw = K * kElemBytes / 16;             // ... and of a weight row
  const uint4* wr[Rows];
#pragma unroll
  for (int r = 0; r < Rows; ++r)
    wr[r] = reinterpret_cast<const uint4*>(static_cast<const char*>(w) + (n + r * N) * K * kElemBytes);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const float scale = Fp8 ? *w_scale : 1.0f;  // written at load time: safe before pdl_wait

  // Before the inputs are ready (launch.cuh): the first batch of weights, into registers. (An L2
  // prefetch of the next 4 KB of the row as well measured slower: batch-1 decode 5.34 against
  // 4.99 ms on the H200, docs/BENCHMARKS.md run 14.)
  int64_t i = lane;
  uint4 wv[Rows][kInFlight];
  if (i + 32 * (kInFlight - 1) < Kw) {
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
  for (bool first = true; i + 32 * (kInFlight - 1) < Kw; i += 32 * kInFlight, first = false) {
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
        for (int m = 0; m < M; ++m) fma_chunk<Fp8>(wv[r][u], xr, m, K8, i + 32 * u, acc[r][m]);
  }
  for (; i < Kw; i += 32) {
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      const uint4 w1 = __ldcs(wr[r] + i);
#pragma unroll
      for (int m = 0; m < M; ++m) fma_chunk<Fp8>(w1, xr, m, K8, i, acc[r][m]);
    }
  }
  // The next kernel (a small one) may be scheduled now: this block's weight stream is done.
  pdl_launch_dependents();
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]) * scale;
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

template <int Rows, bool Fp8>
void launch_gemv(const bf16* x, const void* w, const float* w_scale, void* y, bool y_f32, bool accumulate, int64_t M,
                 int64_t N, int64_t K, cudaStream_t stream) {
  const int64_t blocks = (N + kWarps - 1) / kWarps;
  KERNEL_REQUIRE(blocks <= 0x7fffffff, "gemv: too many columns");
  const dim3 grid(static_cast<unsigned>(blocks));
  void (*kernel)(const bf16*, const void*, const float*, void*, bool, bool, int64_t, int64_t) =
      M == 1   ? gemv_kernel<1, Rows, Fp8>
      : M == 2 ? gemv_kernel<2, Rows, Fp8>
      : M == 3 ? gemv_kernel<3, Rows, Fp8>
               : gemv_kernel<4, Rows, Fp8>;
  launch(kernel, grid, dim3(kWarps * 32), 0, stream, x, w, w_scale, y, y_f32, accumulate, N, K);
}

}  // namespace

bool gemv_supports(int64_t M, int64_t K, const void* x, const void* w) {
  return M >= 1 && M <= kGemvMaxRows && K > 0 && K % 8 == 0 && is_aligned(x, 16) && is_aligned(w, 16);
}

bool gemv_e4m3_supports(int64_t M, int64_t K, const void* x, const void* w) {
  return gemv_supports(M, K, x, w) && K % 16 == 0;
}

void gemv(const bf16* x, const bf16* w, void* y, bool y_f32, bool accumulate, int64_t M, int64_t N, int64_t K,
          cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_supports(M, K, x, w), "gemv: M in [1, kGemvMaxRows], K % 8 == 0, 16-byte aligned operands");
  KERNEL_REQUIRE(y_f32 || !accumulate, "gemv: accumulate into f32 outputs only");
  if (N == 0) return;
  launch_gemv<1, false>(x, w, nullptr, y, y_f32, accumulate, M, N, K, stream);
}

void gemv_silu_mul(const bf16* x, const bf16* w, bf16* out, int64_t M, int64_t I, int64_t K, cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_supports(M, K, x, w), "gemv_silu_mul: M in [1, kGemvMaxRows], K % 8 == 0, 16-byte aligned operands");
  if (I == 0) return;
  launch_gemv<2, false>(x, w, nullptr, out, false, false, M, I, K, stream);
}

void gemv_e4m3(const bf16* x, const uint8_t* w, const float* w_scale, void* y, bool y_f32, bool accumulate, int64_t M,
               int64_t N, int64_t K, cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_e4m3_supports(M, K, x, w), "gemv_e4m3: M in [1, kGemvMaxRows], K % 16 == 0, 16-byte aligned operands");
  KERNEL_REQUIRE(y_f32 || !accumulate, "gemv_e4m3: accumulate into f32 outputs only");
  if (N == 0) return;
  launch_gemv<1, true>(x, w, w_scale, y, y_f32, accumulate, M, N, K, stream);
}

void gemv_silu_mul_e4m3(const bf16* x, const uint8_t* w, const float* w_scale, bf16* out, int64_t M, int64_t I,
                        int64_t K, cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_e4m3_supports(M, K, x, w),
                 "gemv_silu_mul_e4m3: M in [1, kGemvMaxRows], K % 16 == 0, 16-byte aligned operands");
  if (I == 0) return;
  launch_gemv<2, true>(x, w, w_scale, out, false, false, M, I, K, stream);
}

}  // namespace inferscale::cuda
