// Row-wise and element-wise kernels: embedding gather, RMSNorm (with row gather), SiLU*mul,
// row copies across layers, seeded fills.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kRowThreads = 256;

// One block per token, one thread per 16-byte chunk of the row when H % 8 == 0 (row_threads):
// every load of the row is in flight at once. embed: [vocab, H] bf16 -> x: [T, H] f32.
__global__ void embedding_kernel(const bf16* __restrict__ embed, const int32_t* __restrict__ ids,
                                 float* __restrict__ x, int64_t H) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const bf16* src = embed + static_cast<int64_t>(ids[t]) * H;
  float* dst = x + t * H;
  if (H % 8 == 0) {  // 16-byte loads
    for (int64_t c = threadIdx.x; c < H / 8; c += blockDim.x) {
      const Bf16x8 v = reinterpret_cast<const Bf16x8*>(src)[c];
      float f[8];
      bf16x8_to_f32(v, f);
      reinterpret_cast<float4*>(dst)[2 * c] = make_float4(f[0], f[1], f[2], f[3]);
      reinterpret_cast<float4*>(dst)[2 * c + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
  } else {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
  }
}

__device__ __forceinline__ void store4(bf16* p, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&lo);
  u.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(p) = u;
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ float4 norm4(float4 x, float4 w, float inv) {
  return make_float4(x.x * inv * w.x, x.y * inv * w.y, x.z * inv * w.z, x.w * inv * w.w);
}
__device__ __forceinline__ float absmax4(float4 v, float a) {
  return fmaxf(fmaxf(a, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
}
// What a stored value becomes (rounding is monotonic: the largest stored magnitude is the largest
// magnitude rounded).
__device__ __forceinline__ float stored(bf16*, float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float stored(float*, float v) { return v; }

constexpr int kNormCache = 4;  // float4 chunks of the row a thread keeps in registers

// One block per output row. Sum of squares in f32 over the row, then y = x * inv_rms * w; with
// row_amax, also max |y| of the row as stored.
// Vec (H % 4 == 0, 16-byte aligned x and w, 8-byte aligned y): a thread's first kNormCache
// float4 chunks of x and w stay in registers, all loaded at once (a row of 4,096 is one round
// trip, not the 16 dependent ones of the scalar loop, 13.6 us a call at batch 1 on the H200);
// chunks past them (rows over kNormCache * blockDim.x * 4) are read again for the output. The
// norm weights, which no kernel writes, are loaded before pdl_wait (launch.cuh).
template <class OutT, bool Vec>
__global__ void __launch_bounds__(1024) rmsnorm_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                                       const float* __restrict__ w, OutT* __restrict__ y, int64_t H,
                                                       float eps, float* __restrict__ row_amax) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  OutT* yr = y + r * H;
  float am = 0.0f;
  if constexpr (Vec) {
    const int64_t H4 = H / 4;
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4 wv[kNormCache], xv[kNormCache];
#pragma unroll
    for (int u = 0; u < kNormCache; ++u) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
      if (i < H4) wv[u] = __ldg(w4 + i);
    }
    pdl_begin();
    const int64_t src = rows != nullptr ? rows[r] : r;
    const float4* x4 = reinterpret_cast<const float4*>(x + src * H);
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < kNormCache; ++u) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
      if (i < H4) {
        xv[u] = x4[i];
        ss += xv[u].x * xv[u].x + xv[u].y * xv[u].y + xv[u].z * xv[u].z + xv[u].w * xv[u].w;
      }
    }
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kNormCache) * blockDim.x; i < H4; i += blockDim.x) {
      const float4 v = x4[i];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, scratch);
    const float inv = rsqrtf(ss / static_cast<float>(H) + eps);
#pragma unroll
    for (int u = 0; u < kNormCache; ++u) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
      if (i < H4) {
        const float4 v = norm4(xv[u], wv[u], inv);
        store4(yr + 4 * i, v);
        if (row_amax != nullptr) am = absmax4(v, am);
      }
    }
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kNormCache) * blockDim.x; i < H4; i += blockDim.x) {
      const float4 v = norm4(x4[i], __ldg(w4 + i), inv);
      store4(yr + 4 * i, v);
      if (row_amax != nullptr) am = absmax4(v, am);
    }
  } else {
    pdl_begin();
    const int64_t src = rows != nullptr ? rows[r] : r;
    const float* xr = x + src * H;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, scratch);
    const float inv = rsqrtf(ss / static_cast<float>(H) + eps);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
      const float v = xr[i] * inv * w[i];
      store(&yr[i], v);
      if (row_amax != nullptr) am = fmaxf(am, fabsf(v));
    }
  }
  if (row_amax != nullptr) {
    am = block_max(am, scratch);
    if (threadIdx.x == 0) row_amax[r] = stored(y, am);
  }
}

// silu(g) * u of a row's 8 outputs from chunk c (16 bytes) of its gate and up halves, and of one.
__device__ __forceinline__ Bf16x8 silu_mul8(const bf16* row, int64_t I, int64_t c) {
  float g[8], u[8], o[8];
  bf16x8_to_f32(reinterpret_cast<const Bf16x8*>(row)[c], g);
  bf16x8_to_f32(reinterpret_cast<const Bf16x8*>(row + I)[c], u);
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = g[i] / (1.0f + __expf(-g[i])) * u[i];
  return f32_to_bf16x8(o);
}
__device__ __forceinline__ bf16 silu_mul1(const bf16* row, int64_t I, int64_t c) {
  const float g = __bfloat162float(row[c]), u = __bfloat162float(row[I + c]);
  return __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
}

// gate_up: [T, 2I] bf16 -> out: [T, I] bf16. One thread per 8 outputs when I % 8 == 0.
__global__ void silu_mul_kernel(const bf16* __restrict__ gu, bf16* __restrict__ out, int64_t T, int64_t I) {
  pdl_begin();
  const bool vec = I % 8 == 0;
  const int64_t per_row = vec ? I / 8 : I;
  const int64_t n = T * per_row;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / per_row, c = idx % per_row;
    const bf16* row = gu + t * 2 * I;
    if (vec) {
      reinterpret_cast<Bf16x8*>(out + t * I)[c] = silu_mul8(row, I, c);
    } else {
      out[t * I + c] = silu_mul1(row, I, c);
    }
  }
}

// The same, one block per row, with the row's max |out| as stored into row_amax[t] (the down
// projection's input under --quantization fp8: its quantization then skips its own max pass).
__global__ void silu_mul_row_amax_kernel(const bf16* __restrict__ gu, bf16* __restrict__ out, int64_t I,
                                         float* __restrict__ row_amax) {
  __shared__ float scratch[32];
  pdl_begin();
  const int64_t t = blockIdx.x;
  const bf16* row = gu + t * 2 * I;
  float am = 0.0f;
  if (I % 8 == 0) {
    for (int64_t c = threadIdx.x; c < I / 8; c += blockDim.x) {
      const Bf16x8 v = silu_mul8(row, I, c);
      reinterpret_cast<Bf16x8*>(out + t * I)[c] = v;
      float f[8];
      bf16x8_to_f32(v, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) am = fmaxf(am, fabsf(f[i]));
    }
  } else {
    for (int64_t c = threadIdx.x; c < I; c += blockDim.x) {
      const bf16 v = silu_mul1(row, I, c);
      out[t * I + c] = v;
      am = fmaxf(am, fabsf(__bfloat162float(v)));
    }
  }
  am = block_max(am, scratch);
  if (threadIdx.x == 0) row_amax[t] = am;
}

// One thread per chunk (16 bytes, or 4 for rows that are not a whole number of 16) of
// (layer, row i, chunk c). Strides in bytes.
template <class Chunk>
__global__ void copy_rows_kernel(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                 const int64_t* __restrict__ slots, int64_t n, int64_t row_bytes, int32_t L,
                                 int64_t src_ls, int64_t dst_ls, bool scatter) {
  const int64_t chunks = row_bytes / static_cast<int64_t>(sizeof(Chunk));
  const int64_t total = static_cast<int64_t>(L) * n * chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % chunks;
    const int64_t i = (idx / chunks) % n;
    const int64_t l = idx / (chunks * n);
    const int64_t s_row = scatter ? i : slots[i];
    const int64_t d_row = scatter ? slots[i] : i;
    const Chunk* s = reinterpret_cast<const Chunk*>(src + l * src_ls + s_row * row_bytes) + c;
    Chunk* d = reinterpret_cast<Chunk*>(dst + l * dst_ls + d_row * row_bytes) + c;
    *d = *s;
  }
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Box-Muller on two 24-bit uniforms from one hash of (seed, index).
__global__ void fill_random_kernel(bf16* p, int64_t n, uint64_t seed, float mean, float std) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(seed * 0x632be59bd9b4e019ull + static_cast<uint64_t>(i));
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
    const float u2 = static_cast<float>((h >> 16) & 0xffffffu) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    p[i] = __float2bfloat16_rn(mean + std * z);
  }
}

template <class T>
__global__ void fill_kernel(T* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(&p[i], v);
}

// Threads for a row of `chunks` units of work, each thread taking up to `per_thread` of them: a
// whole number of warps, at most 1,024.
unsigned row_threads(int64_t chunks, int64_t per_thread) {
  const int64_t t = ((chunks + per_thread - 1) / per_thread + 31) / 32 * 32;
  return static_cast<unsigned>(std::clamp<int64_t>(t, 32, 1024));
}

template <class OutT>
void rmsnorm_impl(const float* x, const int32_t* rows, const float* w, OutT* y, int64_t R, int64_t H, float eps,
                  cudaStream_t stream, float* row_amax) {
  if (R == 0) return;
  KERNEL_REQUIRE(R <= 0x7fffffff && H > 0, "rmsnorm shape");
  const dim3 grid(static_cast<unsigned>(R));
  if (H % 4 == 0 && is_aligned(x, 16) && is_aligned(w, 16) && is_aligned(y, 4 * sizeof(OutT))) {
    launch(rmsnorm_kernel<OutT, true>, grid, dim3(row_threads(H / 4, kNormCache)), 0, stream, x, rows, w, y, H, eps, row_amax);
  } else {
    launch(rmsnorm_kernel<OutT, false>, grid, dim3(kRowThreads), 0, stream, x, rows, w, y, H, eps, row_amax);
  }
}

}  // namespace

void embedding(const bf16* embed, const int32_t* token_ids, float* x, int64_t T, int64_t H, cudaStream_t stream) {
  if (T == 0) return;
  KERNEL_REQUIRE(T <= 0x7fffffff, "embedding: too many tokens");
  const unsigned threads = H % 8 == 0 ? row_threads(H / 8, 1) : kRowThreads;
  launch(embedding_kernel, dim3(static_cast<unsigned>(T)), dim3(threads), 0, stream, embed, token_ids, x, H);
}

void rmsnorm(const float* x, const int32_t* rows, const float* w, bf16* y, int64_t R, int64_t H, float eps,
             cudaStream_t stream, float* row_amax) {
  rmsnorm_impl(x, rows, w, y, R, H, eps, stream, row_amax);
}
void rmsnorm(const float* x, const int32_t* rows, const float* w, float* y, int64_t R, int64_t H, float eps,
             cudaStream_t stream) {
  rmsnorm_impl(x, rows, w, y, R, H, eps, stream, static_cast<float*>(nullptr));
}

void silu_mul(const bf16* gate_up, bf16* out, int64_t T, int64_t I, cudaStream_t stream, float* row_amax) {
  if (T == 0) return;
  if (row_amax != nullptr) {
    KERNEL_REQUIRE(T <= 0x7fffffff, "silu_mul: too many rows");
    const unsigned threads = I % 8 == 0 ? row_threads(I / 8, 2) : kRowThreads;
    launch(silu_mul_row_amax_kernel, dim3(static_cast<unsigned>(T)), dim3(threads), 0, stream, gate_up, out, I, row_amax);
    return;
  }
  const int64_t work = T * (I % 8 == 0 ? I / 8 : I);
  launch(silu_mul_kernel, dim3(grid_for(work, 256)), dim3(256), 0, stream, gate_up, out, T, I);
}

void copy_rows(const void* src, void* dst, const int64_t* slots, int64_t n, int64_t row_bytes, int32_t num_layers,
               int64_t src_layer_stride, int64_t dst_layer_stride, bool scatter, cudaStream_t stream) {
  if (n == 0 || num_layers == 0) return;
  KERNEL_REQUIRE(row_bytes % 4 == 0 && src_layer_stride % 4 == 0 && dst_layer_stride % 4 == 0,
                 "copy_rows needs rows and layer strides of a multiple of 4 bytes");
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const bool wide = row_bytes % 16 == 0 && src_layer_stride % 16 == 0 && dst_layer_stride % 16 == 0 &&
                    is_aligned(src, 16) && is_aligned(dst, 16);
  if (wide) {
    copy_rows_kernel<uint4><<<grid_for(num_layers * n * (row_bytes / 16), 256), 256, 0, stream>>>(
        s, d, slots, n, row_bytes, num_layers, src_layer_stride, dst_layer_stride, scatter);
  } else {
    copy_rows_kernel<uint32_t><<<grid_for(num_layers * n * (row_bytes / 4), 256), 256, 0, stream>>>(
        s, d, slots, n, row_bytes, num_layers, src_layer_stride, dst_layer_stride, scatter);
  }
  CUDA_CHECK_LAUNCH("copy_rows_kernel");
}

void fill_random_bf16(bf16* p, int64_t n, uint64_t seed, float mean, float std, cudaStream_t stream) {
  if (n == 0) return;
  fill_random_kernel<<<grid_for(n, 256), 256, 0, stream>>>(p, n, seed, mean, std);
  CUDA_CHECK_LAUNCH("fill_random_kernel");
}

void fill_f32(float* p, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<float><<<grid_for(n, 256), 256, 0, stream>>>(p, n, value);
  CUDA_CHECK_LAUNCH("fill_kernel<float>");
}

void fill_bf16(bf16* p, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<bf16><<<grid_for(n, 256), 256, 0, stream>>>(p, n, value);
  CUDA_CHECK_LAUNCH("fill_kernel<bf16>");
}

}  // namespace inferscale::cuda
