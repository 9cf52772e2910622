// Skinny linear layers over FP8 E4M3 weights on tensor cores (W8A16, --quantization fp8, decode
// steps of 1-8 sequences):
//   y[m, n] (+)= scale * sum_k x[m, k] code[n, k]      x: [M, K] bf16; codes: [N, K]; y: [M, N] f32 or bf16
// and the gated form over rows n and I + n of [2 I, K]: out[m, n] = silu(gate) * up (bf16).
//
// The CUDA-core GEMV (gemv.cu) widens every code to f32 and runs an FMA per code and row: at FP8
// that work, not the bytes, bounds it (bench_cuda_kernels --gemm-fp8: 0.9x of bf16's time at one
// row, 2.6x at four, H100). Here a block takes 16 weight rows (an m16n8k16 MMA's M) and its 4
// warps a quarter of K each; a lane streams 16 codes of rows g and g + 8 (g = lane / 4) per step
// of 64 columns, widens them to f16 by the hardware's pair conversion (exact), and the MMA takes
// x's rows as its 8 columns (B; rows past M are zero), x widened bf16 -> f16 (saturating at
// +-65504). The sum over k is order-free, so the MMA's k slots are laid over each lane's own 16
// codes (lane (g, q) holds codes k = 64 s + 16 q + 4 j .. + 3 of step j's slots 2q, 2q + 1,
// 2q + 8, 2q + 9) and x is read in the same order: no shuffle, no shared memory for the operands.
// The warps' partial tiles are summed through shared memory; f32 accumulation throughout.
// Needs K % 64 == 0, 16-byte aligned x and codes. CPU twin: the f32 product of the dequantized
// codes the parity tests compute in double (tests/cuda/test_cuda_fp8_linear.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kWarps = 4;      // a block's warps: the same 16 rows, a quarter of K each
constexpr int kTileRows = 16;  // weight rows a block covers (the MMA's M)
constexpr int kStep = 64;      // columns of K a lane's 16-byte load and a warp's 4 MMAs cover
// Steps of codes a lane has in flight (16 bytes a weight row each). One step ahead measured
// 1.5 TB/s on qkv at one row on the H100 (16.8 us), too few bytes in flight for HBM.
constexpr int kAhead = 4;

// Two bf16 (one word) as two f16, rounded to nearest, saturating at +-65504.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  uint32_t h;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n" : "=r"(h) : "f"(f.y), "f"(f.x));
  return h;
}

// Rows = 1: y[m, n] (+)= scale * x[m] . codes[n]; Rows = 2: out[m, n] = silu(g) * u with g, u the
// dots with rows n and N + n (bf16).
template <int Rows>
__global__ void __launch_bounds__(kWarps * 32) gemv_e4m3_mma_kernel(const bf16* __restrict__ x, const uint8_t* __restrict__ w,
                                                                    const float* __restrict__ w_scale, void* __restrict__ y,
                                                                    bool y_f32, bool accumulate, int32_t M, int64_t N,
                                                                    int64_t K) {
  __shared__ float partial[kWarps - 1][Rows][4 * 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int64_t steps = K / kStep, per_warp = (steps + kWarps - 1) / kWarps;
  const int64_t s0 = warp * per_warp, s1 = s0 + per_warp < steps ? s0 + per_warp : steps;
  // Rows g and g + 8 of the tile (a tile past N reads its last row again and stores nothing of it).
  const uint4* wr[Rows][2];
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n0 + g + 8 * h < N ? n0 + g + 8 * h : N - 1;
      wr[r][h] = reinterpret_cast<const uint4*>(w + (n + r * N) * K) + q;  // + 4 s: step s
    }
  const bool has_x = g < M;  // the MMA's column g is x's row g
  const uint4* xr = reinterpret_cast<const uint4*>(x + (has_x ? g : 0) * K) + 2 * q;  // + 8 s: step s
  const float scale = *w_scale;  // written at load time: safe before pdl_wait

  // The first kAhead steps' codes before the inputs are ready (launch.cuh); then each step's
  // slot is refilled with the step kAhead on as soon as its codes are taken.
  uint4 wv[kAhead][Rows][2];
#pragma unroll
  for (int u = 0; u < kAhead; ++u)
    if (s0 + u < s1) {
#pragma unroll
      for (int r = 0; r < Rows; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][r][h] = __ldcs(wr[r][h] + 4 * (s0 + u));
    }
  pdl_wait();

  float c[Rows][4];
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) c[r][i] = 0.0f;
  for (int64_t s = s0; s < s1; s += kAhead) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t t = s + u;  // this step (the slot index u stays a constant: registers)
      if (t >= s1) break;
      uint4 cur[Rows][2];
#pragma unroll
      for (int r = 0; r < Rows; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) cur[r][h] = wv[u][r][h];
      if (t + kAhead < s1) {
#pragma unroll
        for (int r = 0; r < Rows; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) wv[u][r][h] = __ldcs(wr[r][h] + 4 * (t + kAhead));
      }
      // x[g, 64 t + 16 q .. + 16): pairs 0..7 (plain loads: the kernel before wrote x).
      uint32_t xp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (has_x) {
        const uint4 x0 = xr[8 * t], x1 = xr[8 * t + 1];
        xp[0] = x0.x, xp[1] = x0.y, xp[2] = x0.z, xp[3] = x0.w, xp[4] = x1.x, xp[5] = x1.y, xp[6] = x1.z, xp[7] = x1.w;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t b0 = bf16x2_to_f16x2(xp[2 * j]), b1 = bf16x2_to_f16x2(xp[2 * j + 1]);
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          const uint32_t w0 = (&cur[r][0].x)[j], w1 = (&cur[r][1].x)[j];  // codes 4j .. 4j + 3 of rows g, g + 8
          const uint32_t a[4] = {e4m3x2_to_f16x2(w0), e4m3x2_to_f16x2(w1), e4m3x2_to_f16x2(w0 >> 16),
                                 e4m3x2_to_f16x2(w1 >> 16)};
          mma_f16_16816(c[r], a, b0, b1);
        }
      }
    }
  }
  pdl_launch_dependents();  // this block's weight stream is done

  // Warps 1..3 hand their tiles to warp 0, which adds them and stores.
  if (warp > 0) {
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp - 1][r][i * 32 + lane] = c[r][i];
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int v = 0; v < kWarps - 1; ++v)
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[r][i] += partial[v][r][i * 32 + lane];
  // c[r][i]: weight row g + 8 (i / 2) of the tile, x row 2 q + i % 2.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t n = n0 + g + 8 * (i >> 1);
    const int m = 2 * q + (i & 1);
    if (n >= N || m >= M) continue;
    if constexpr (Rows == 2) {
      const float gate = c[0][i] * scale, up = c[1][i] * scale;
      static_cast<bf16*>(y)[m * N + n] = __float2bfloat16_rn(gate / (1.0f + __expf(-gate)) * up);
    } else if (y_f32) {
      float* out = static_cast<float*>(y) + m * N + n;
      *out = accumulate ? *out + c[0][i] * scale : c[0][i] * scale;
    } else {
      static_cast<bf16*>(y)[m * N + n] = __float2bfloat16_rn(c[0][i] * scale);
    }
  }
}

template <int Rows>
void launch_mma(const bf16* x, const uint8_t* w, const float* w_scale, void* y, bool y_f32, bool accumulate, int64_t M,
                int64_t N, int64_t K, cudaStream_t stream) {
  const int64_t blocks = (N + kTileRows - 1) / kTileRows;
  KERNEL_REQUIRE(blocks <= 0x7fffffff, "gemv_e4m3_mma: too many columns");
  launch(gemv_e4m3_mma_kernel<Rows>, dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), 0, stream, x, w, w_scale, y,
         y_f32, accumulate, static_cast<int32_t>(M), N, K);
}

}  // namespace

bool gemv_e4m3_mma_supports(int64_t M, int64_t K, const void* x, const void* w) {
  return M >= 1 && M <= kGemvE4m3MmaMaxRows && K > 0 && K % kStep == 0 && is_aligned(x, 16) && is_aligned(w, 16);
}

void gemv_e4m3_mma(const bf16* x, const uint8_t* w, const float* w_scale, void* y, bool y_f32, bool accumulate,
                   int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_e4m3_mma_supports(M, K, x, w), "gemv_e4m3_mma: M in [1, 8], K % 64 == 0, 16-byte aligned operands");
  KERNEL_REQUIRE(y_f32 || !accumulate, "gemv_e4m3_mma: accumulate into f32 outputs only");
  if (N == 0) return;
  launch_mma<1>(x, w, w_scale, y, y_f32, accumulate, M, N, K, stream);
}

void gemv_silu_mul_e4m3_mma(const bf16* x, const uint8_t* w, const float* w_scale, bf16* out, int64_t M, int64_t I,
                            int64_t K, cudaStream_t stream) {
  KERNEL_REQUIRE(gemv_e4m3_mma_supports(M, K, x, w),
                 "gemv_silu_mul_e4m3_mma: M in [1, 8], K % 64 == 0, 16-byte aligned operands");
  if (I == 0) return;
  launch_mma<2>(x, w, w_scale, out, false, false, M, I, K, stream);
}

}  // namespace inferscale::cuda
