// A bf16 tensor into FP8 E4M3 with one scale for the whole tensor (the FP8 projections'
// operands, CudaForwardOps --quantization fp8: cuBLASLt's FP8 GEMMs on Hopper are fast with a
// scalar scale per operand, and 1.3-1.6x slower with a scale per row; bench_cuda_kernels --gemm-fp8):
//   amax[m]       = max_k |x[m, k]|                                  (absmax_rows)
//   s             = max_m amax[m] / 448 (0 for an all-zero or non-finite tensor)
//   codes[m, k]   = e4m3(x[m, k] * (1 / s)), rounded to nearest even, saturating   (quantize_e4m3_tensor)
// The CPU twin is tensor/fp8.h's quantize_e4m3_row over the M * K values (bit for bit: the same
// scale, the same products, the same rounding). Weights take the same two kernels once at load;
// activations every forward, launched with PDL (launch.cuh); a small tensor without its row
// maxima takes one kernel of one block (quantize_e4m3_one_block_kernel).
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 256;

// This thread's max |x| over the 16-byte words v[i], i = threadIdx.x, + blockDim.x, ... < n8 (a
// NaN is dropped by fmaxf, as the host's fmax drops it).
__device__ __forceinline__ float absmax_words(const Bf16x8* __restrict__ v, int64_t n8) {
  float a = 0.0f;
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
    float f[8];
    bf16x8_to_f32(v[i], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(f[j]));
  }
  return a;
}

// The codes of the same words (8 a word), x times `inv` (1 / scale).
__device__ __forceinline__ void codes_of_words(const Bf16x8* __restrict__ v, int64_t n8, float inv, uint2* __restrict__ out) {
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
    float f[8];
    bf16x8_to_f32(v[i], f);
    out[i] = f32x8_to_e4m3(f, inv);
  }
}

// One block a row (grid-strided): amax[m] = max |x[m, :]|, x read as 16-byte words (K % 8 == 0).
__global__ void __launch_bounds__(kThreads) absmax_rows_kernel(const bf16* __restrict__ x, int64_t M, int64_t K,
                                                                float* __restrict__ amax) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t K8 = K / 8;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const float a = block_max(absmax_words(reinterpret_cast<const Bf16x8*>(x + m * K), K8), scratch);
    if (threadIdx.x == 0) amax[m] = a;
  }
}

// Every block takes the tensor's amax from the M row maxima, then writes the codes of its rows
// (grid-strided; 8 codes a thread a step); block 0 stores the scale.
__global__ void __launch_bounds__(kThreads) quantize_e4m3_tensor_kernel(const bf16* __restrict__ x, int64_t M, int64_t K,
                                                                         const float* __restrict__ amax,
                                                                         uint8_t* __restrict__ codes,
                                                                         float* __restrict__ scale_out) {
  __shared__ float scratch[32];
  pdl_begin();
  float a = 0.0f;
  for (int64_t m = threadIdx.x; m < M; m += kThreads) a = fmaxf(a, amax[m]);
  a = block_max(a, scratch);
  const float scale = e4m3_scale(a), inv = e4m3_inv(scale);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
  const int64_t K8 = K / 8;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x)
    codes_of_words(reinterpret_cast<const Bf16x8*>(x + m * K), K8, inv, reinterpret_cast<uint2*>(codes + m * K));
}

// A small tensor (a decode step's x) in one block: its maximum, then its codes, from the same
// 16-byte words (the second pass hits L1/L2). One kernel instead of absmax_rows + quantize: a
// kernel boundary fewer in the forward, where x's row maxima are not ready (the output
// projection's input). Larger tensors keep the two grid-wide kernels: on the H100
// (bench_cuda_serving (b)) one block took batch-1 decode from 4.14-4.15 to 4.00 ms (o_proj's 4,096 values and down's
// 14,336), but with a cut at 32,768 values (o_proj at batch 8 in one block) batch 8 went from
// 4.80-4.89 to 5.04-5.05 ms; hence kQuantizeOneBlockElems = 16,384. (The down projection's input
// took this path then; the SiLU now writes its row maxima, as RMSNorm does for QKV and gate/up.)
constexpr int kOneBlockThreads = 1024;

__global__ void __launch_bounds__(kOneBlockThreads) quantize_e4m3_one_block_kernel(const bf16* __restrict__ x, int64_t n,
                                                                                    uint8_t* __restrict__ codes,
                                                                                    float* __restrict__ scale_out) {
  __shared__ float scratch[32];
  pdl_begin();
  const Bf16x8* v = reinterpret_cast<const Bf16x8*>(x);
  const float scale = e4m3_scale(block_max(absmax_words(v, n / 8), scratch)), inv = e4m3_inv(scale);
  if (threadIdx.x == 0) *scale_out = scale;
  codes_of_words(v, n / 8, inv, reinterpret_cast<uint2*>(codes));
}

unsigned row_blocks(int64_t M) {
  // Enough blocks to fill the GPU at a forward's few rows, bounded for a weight's many (each
  // block of quantize_e4m3_tensor reads all M row maxima).
  return static_cast<unsigned>(M < 1024 ? M : 1024);
}

}  // namespace

bool quantize_e4m3_supports(int64_t K, const void* x, const void* codes) {
  return K > 0 && K % 8 == 0 && is_aligned(x, 16) && is_aligned(codes, 8);
}

void quantize_e4m3_tensor(const bf16* x, int64_t M, int64_t K, float* row_amax, uint8_t* codes, float* scale,
                          cudaStream_t stream, bool row_amax_ready) {
  KERNEL_REQUIRE(quantize_e4m3_supports(K, x, codes), "quantize_e4m3_tensor: K % 8 == 0, x 16-byte and codes 8-byte aligned");
  if (M == 0) return;
  if (!row_amax_ready && quantize_e4m3_in_one_block(M, K)) {
    launch(quantize_e4m3_one_block_kernel, dim3(1), dim3(kOneBlockThreads), 0, stream, x, M * K, codes, scale);
    return;
  }
  if (!row_amax_ready) launch(absmax_rows_kernel, dim3(row_blocks(M)), dim3(kThreads), 0, stream, x, M, K, row_amax);
  launch(quantize_e4m3_tensor_kernel, dim3(row_blocks(M)), dim3(kThreads), 0, stream, x, M, K,
         static_cast<const float*>(row_amax), codes, scale);
}

}  // namespace inferscale::cuda
