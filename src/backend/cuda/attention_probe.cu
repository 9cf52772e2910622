// The probe's attention weights (ForwardBatch::probes): how much some query rows of one sequence
// attend to a range of its entries, summed over query heads, added into mass [rows, keys] once a
// layer. The CPU twin is cpu::attention_mass (backend/cpu/cpu_ops.h); the numbers differ by the
// bf16 rounding of q and K only (this kernel's arithmetic is f32, the twin's softmax double).
//
// One CTA per (row r, query head h), kv head g = h / group; entries i in [kv_start, positions[r]]:
//   pass 1  each thread takes entries i = kv_start + tid, + blockDim, ...: logit_i = q . K_i *
//           scale, kept as a running (max, sum of exp) pair; the CTA merges the pairs
//   pass 2  entries j in [key_begin, key_end), j <= positions[r]: the same logit again,
//           mass[r, j - key_begin] += exp(logit_j - max) / sum   (atomicAdd: heads add in any order)
// Probes are small (tens of rows): the logits are recomputed rather than kept.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 128;

// q . K of (slot, kv head g) over D elements (D a multiple of 8), K bf16 or FP8 codes x scale.
__device__ __forceinline__ float dot_key(const float* q, const KvCache& c, int64_t slot, int32_t g, int32_t NKV, int32_t D) {
  const int64_t row = slot * NKV + g;
  float acc = 0.0f, k[8];
  for (int e = 0; e < D; e += 8) {
    if (c.fp8)
      e4m3x8_to_f32(*reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(c.k) + row * D + e), c.k_scale[row], k);
    else
      bf16x8_to_f32(*reinterpret_cast<const Bf16x8*>(static_cast<const bf16*>(c.k) + row * D + e), k);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(q[e + i], k[i], acc);
  }
  return acc;
}

// (max, sum) pairs merged: the sum rescaled to the larger max.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

__global__ void attention_mass_kernel(AttentionMassArgs a, float* mass) {
  extern __shared__ float qs[];  // [D]
  __shared__ float red_m[kThreads / 32], red_s[kThreads / 32];
  const AttentionMassShape& s = a.s;
  const int32_t r = blockIdx.x, h = blockIdx.y, g = h / (s.num_heads / s.num_kv_heads), D = s.head_dim;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    qs[d] = __bfloat162float(a.q[(static_cast<int64_t>(r) * s.num_heads + h) * D + d]);
  __syncthreads();
  const int32_t last = a.positions[r];
  auto slot_of = [&](int32_t i) {
    return static_cast<int64_t>(a.blocks[i / s.block_size]) * s.block_size + i % s.block_size;
  };
  float m = -INFINITY, sum = 0.0f;
  for (int32_t i = s.kv_start + threadIdx.x; i <= last; i += blockDim.x) {
    const float l = dot_key(qs, a.cache, slot_of(i), g, s.num_kv_heads, D) * s.scale;
    merge(m, sum, l, 1.0f);
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, sum, off);
    merge(m, sum, m2, s2);
  }
  if ((threadIdx.x & 31) == 0) {
    red_m[threadIdx.x / 32] = m;
    red_s[threadIdx.x / 32] = sum;
  }
  __syncthreads();
  m = red_m[0];
  sum = red_s[0];
  for (int w = 1; w < kThreads / 32; ++w) merge(m, sum, red_m[w], red_s[w]);
  const int32_t nk = s.key_end - s.key_begin, end = min(s.key_end, last + 1);
  for (int32_t j = s.key_begin + threadIdx.x; j < end; j += blockDim.x) {
    const float l = dot_key(qs, a.cache, slot_of(j), g, s.num_kv_heads, D) * s.scale;
    atomicAdd(&mass[static_cast<int64_t>(r) * nk + (j - s.key_begin)], __expf(l - m) / sum);
  }
}

}  // namespace

void attention_mass(const AttentionMassArgs& a, float* mass, cudaStream_t stream) {
  if (a.s.rows == 0 || a.s.key_end <= a.s.key_begin) return;
  const dim3 grid(static_cast<unsigned>(a.s.rows), static_cast<unsigned>(a.s.num_heads));
  attention_mass_kernel<<<grid, kThreads, static_cast<size_t>(a.s.head_dim) * sizeof(float), stream>>>(a, mass);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace inferscale::cuda
