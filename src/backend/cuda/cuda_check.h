// CUDA_CHECK / CUBLAS_CHECK on every CUDA and cuBLAS call; CUDA_CHECK_LAUNCH after every kernel
// launch; KERNEL_REQUIRE for argument checks inside launchers. Failures throw inferscale::Error
// (kInternal, or kResource for out-of-memory) naming the call, the error and the file and line.
// This header stays free of fmt so that nvcc-compiled files can include it; the throwing
// functions live in cuda_check.cpp.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace inferscale::detail {
[[noreturn]] void throw_cuda(cudaError_t e, const char* what, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line);
[[noreturn]] void throw_kernel_arg(const char* cond, const char* msg, const char* file, int line);
}  // namespace inferscale::detail

#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    const cudaError_t is_err_ = (call);                                             \
    if (is_err_ != cudaSuccess) [[unlikely]]                                        \
      ::inferscale::detail::throw_cuda(is_err_, #call, __FILE__, __LINE__);         \
  } while (0)

#define CUBLAS_CHECK(call)                                                          \
  do {                                                                              \
    const cublasStatus_t is_st_ = (call);                                           \
    if (is_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                               \
      ::inferscale::detail::throw_cublas(is_st_, #call, __FILE__, __LINE__);        \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here; execution errors surface at the
// next synchronizing call (which is CUDA_CHECKed too).
#define CUDA_CHECK_LAUNCH(name)                                                     \
  do {                                                                              \
    const cudaError_t is_err_ = cudaGetLastError();                                 \
    if (is_err_ != cudaSuccess) [[unlikely]]                                        \
      ::inferscale::detail::throw_cuda(is_err_, name, __FILE__, __LINE__);          \
  } while (0)

// Host-side argument check in kernel launchers (an internal error: the caller broke a contract).
#define KERNEL_REQUIRE(cond, msg)                                                   \
  do {                                                                              \
    if (!(cond)) [[unlikely]]                                                       \
      ::inferscale::detail::throw_kernel_arg(#cond, msg, __FILE__, __LINE__);       \
  } while (0)
