// Kernel launches of the forward with Programmatic Dependent Launch (PDL, sm_90).
//
// A kernel launched by `launch()` may start while the kernel before it on the stream is still
// running: its blocks are scheduled once every block of the previous kernel has executed
// pdl_launch_dependents() (or exited). The rule that keeps this exact:
//   * every kernel launched by `launch()` calls pdl_wait() before it reads anything an earlier
//     kernel wrote and before it writes anything at all; pdl_wait() returns when the previous
//     kernel has completed and its writes are visible (and that kernel waited for its own
//     predecessor, so every earlier kernel has completed too);
//   * before pdl_wait() a kernel reads only what no kernel writes: weights (the GEMV prefetches
//     its weight rows while the norm before it runs) and the forward's metadata (MetaUpload:
//     positions, slots, block tables, attention work items, RoPE tables), which the host copies
//     in stream order before the forward's first kernel (never inside a graph) and which no
//     kernel writes; the attention kernels walk their metadata chains while the kernel before
//     them runs.
// Kernels launched with <<<>>> (and cuBLASLt's, memcpys) keep full stream order; pdl_wait() in a
// kernel launched without the attribute returns at once. Capturing into a CUDA graph keeps the
// programmatic edges.
//
// set_programmatic_launch(false) (cuda_ops.h) turns the attribute off for every later launch (process-wide:
// the launchers take a stream, not a backend): a side-by-side benchmark, and a way out should
// a driver misbehave. Results are the same either way (the parity tests run with it on).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"

namespace inferscale::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel's blocks be scheduled (they still pdl_wait() for this kernel's end).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The prologue of a small kernel: let the next kernel be scheduled (it may prefetch its weights or
// walk its metadata meanwhile), then wait for the previous one. Triggering before the wait, so
// that a GEMV two or three small kernels ahead is already resident, measured faster than after
// it: batch-1 decode 4.30 against 4.36 ms on the H200 (bench_cuda_serving (b)). The GEMV
// triggers only after its weight loop, so two weight streams never overlap.
__device__ __forceinline__ void pdl_begin() {
  pdl_launch_dependents();
  pdl_wait();
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when it is on; throws
// (CUDA_CHECK) on a launch error.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  // Not on the legacy default stream (tests launch there): it orders itself with every stream.
  const bool legacy = stream == nullptr || stream == cudaStreamLegacy;
  cfg.numAttrs = programmatic_launch() && !legacy ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace inferscale::cuda
