// The ops encoders (BERT) need beyond the decoders' (the CPU twins: backend/cpu/cpu_ops.h; the
// op-level parity suite, tests/cuda/op_parity.h, compares them through ForwardOps): embedding rows
// by position or a fixed row, accumulated; LayerNorm; the exact (erf) GELU; a linear layer's bias;
// the output rows' gather. Row-wise or element-wise, f32 arithmetic; not tuned (encoders are
// not on the serving path's clock yet).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, int64_t i) { return __bfloat162float(p[i]); }

// x[t] (+)= table[index[t]] (index null: row 0). One block per token.
__global__ void embedding_rows_kernel(const bf16* __restrict__ table, const int32_t* __restrict__ index,
                                      bool accumulate, float* __restrict__ x, int64_t H) {
  const int64_t t = blockIdx.x;
  const int64_t row = index != nullptr ? index[t] : 0;
  pdl_begin();
  const bf16* src = table + row * H;
  float* dst = x + t * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] = (accumulate ? dst[i] : 0.0f) + __bfloat162float(src[i]);
}

// y = (x - mean) / sqrt(var + eps) * w + b per row (population variance, two passes over the
// row). In place allowed: each thread writes only the elements it read, after both reductions.
// y is f32, or bf16 (the compute copy a linear reads).
template <class T>
__global__ void layer_norm_kernel(const float* x, const float* __restrict__ w, const float* __restrict__ b, T* y,
                                  int64_t H, float eps) {
  __shared__ float scratch[32];
  pdl_begin();
  const float* xr = x + blockIdx.x * H;
  T* yr = y + blockIdx.x * H;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, scratch) / static_cast<float>(H);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) ss += (xr[i] - mean) * (xr[i] - mean);
  const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(H) + eps);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) store(yr + i, (xr[i] - mean) * inv * w[i] + b[i]);
}

template <class T>
__global__ void gelu_kernel(T* x, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = load(x, i);
    store(x + i, 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

template <class T>
__global__ void add_bias_kernel(T* y, const float* __restrict__ bias, int64_t M, int64_t N) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < M * N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(y + i, load(y, i) + bias[i % N]);
}

// out[r] = x[rows[r]]. One block per output row.
__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                   float* __restrict__ out, int64_t H) {
  const int64_t r = blockIdx.x, src = rows[r];
  pdl_begin();
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[r * H + i] = x[src * H + i];
}

}  // namespace

void embedding_rows(const bf16* table, const int32_t* index, bool accumulate, float* x, int64_t T, int64_t H,
                    cudaStream_t stream) {
  if (T == 0) return;
  KERNEL_REQUIRE(T <= 0x7fffffff, "embedding_rows: too many tokens");
  launch(embedding_rows_kernel, dim3(static_cast<unsigned>(T)), dim3(kThreads), 0, stream, table, index, accumulate, x, H);
}

template <class T>
void launch_layer_norm(const float* x, const float* w, const float* b, T* y, int64_t rows, int64_t H, float eps,
                       cudaStream_t stream) {
  if (rows == 0) return;
  KERNEL_REQUIRE(rows <= 0x7fffffff && H > 0, "layer_norm shape");
  launch(layer_norm_kernel<T>, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, x, w, b, y, H, eps);
}
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t H, float eps,
                cudaStream_t stream) {
  launch_layer_norm(x, w, b, y, rows, H, eps, stream);
}
void layer_norm(const float* x, const float* w, const float* b, bf16* y, int64_t rows, int64_t H, float eps,
                cudaStream_t stream) {
  launch_layer_norm(x, w, b, y, rows, H, eps, stream);
}

void gelu(float* x, int64_t n, cudaStream_t stream) {
  if (n > 0) launch(gelu_kernel<float>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream, x, n);
}
void gelu(bf16* x, int64_t n, cudaStream_t stream) {
  if (n > 0) launch(gelu_kernel<bf16>, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, stream, x, n);
}

void add_bias(float* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream) {
  if (M * N > 0) launch(add_bias_kernel<float>, dim3(grid_for(M * N, kThreads)), dim3(kThreads), 0, stream, y, bias, M, N);
}
void add_bias(bf16* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream) {
  if (M * N > 0) launch(add_bias_kernel<bf16>, dim3(grid_for(M * N, kThreads)), dim3(kThreads), 0, stream, y, bias, M, N);
}

void gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H, cudaStream_t stream) {
  if (R == 0) return;
  KERNEL_REQUIRE(R <= 0x7fffffff, "gather_rows: too many rows");
  launch(gather_rows_kernel, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, stream, x, rows, out, H);
}

}  // namespace inferscale::cuda
