// Inline-PTX wrappers for the tensor-core attention tile: cp.async (16 and 4 bytes, zero-fill),
// ldmatrix (x4, plain and transposed), movmatrix (transposed) and mma.sync m16n8k16 bf16 (or f16) -> f32.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A 16x16 (row-major), 4 regs of 2 bf16: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 8+2t..)  a3 (g+8, 8+2t..)
//   B 16x8 (k x n),      2 regs:           b0 (k=2t..2t+1, n=g)            b1 (k=8+2t.., n=g)
//   C 16x8 f32,          4 regs:           c0,c1 (g, 2t..2t+1)             c2,c3 (g+8, 2t..2t+1)
// ldmatrix.x4: lane l supplies the address of row l % 8 of 8x8 matrix l / 8; register i returns
// matrix i with lane l holding (row l / 4, cols 2(l % 4) .. +1), or its transpose with .trans.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace inferscale::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The functions below take shared memory as a generic pointer or as its shared-window address
// (smem_addr: a kernel that keeps its tiles' addresses in registers saves the conversion).
// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is not read then).
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16(smem_addr(smem), gmem, valid);
}
// 4 bytes global -> shared (through L1), zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(uint32_t smem, const void* gmem, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  cp_async_4(smem_addr(smem), gmem, valid);
}
__device__ __forceinline__ float lds_f32(uint32_t smem) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(smem));
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) { ldmatrix_x4(r, smem_addr(smem)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4_trans(r, smem_addr(smem));
}

// The transpose of an 8x8 b16 matrix held as a fragment (lane (g, t) holds row g, cols 2t..2t+1):
// lane (g, t) receives rows 2t, 2t+1 of column g.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// c += a * b
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b with f16 operands (the FP8 cache's tiles: E4M3 codes widen to f16 exactly).
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// v, held in a register from here on: ptxas cannot recompute what an asm statement produced, so
// it keeps the value instead of rematerialising it (and the lane arithmetic behind it) where used.
template <class T>
  requires(std::is_integral_v<T> && sizeof(T) == 4)
__device__ __forceinline__ T pinned(T v) {
  asm volatile("" : "+r"(v));
  return v;
}
template <class T>
__device__ __forceinline__ const T* pinned(const T* p) {
  asm volatile("" : "+l"(p));
  return p;
}

// 2^x by the SFU alone (ex2.approx.ftz): exp2f() adds a range check and two multiplies around it
// so that results below 2^-126 come out as subnormals; a softmax weight that small is 0 here (the
// attention kernels' inner loops: ~20 fewer instructions a 16-entry decode step, counted in the SASS).
// exp2_ftz(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two bf16 (one register of an operand fragment) as two f16.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  return pack_f16x2(f.x, f.y);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace inferscale::cuda
