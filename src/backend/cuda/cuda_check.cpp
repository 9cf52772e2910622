#include "backend/cuda/cuda_check.h"

#include <fmt/format.h>

#include "util/check.h"

namespace inferscale::detail {

void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  const ErrorKind kind = e == cudaErrorMemoryAllocation ? ErrorKind::kResource : ErrorKind::kInternal;
  throw Error(kind, fmt::format("CUDA error {} ({}) in {} ({}:{})", static_cast<int>(e), cudaGetErrorString(e), what,
                                file, line));
}

void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  throw Error(ErrorKind::kInternal, fmt::format("cuBLAS status {} ({}) in {} ({}:{})", static_cast<int>(s),
                                               cublasLtGetStatusString(s), what, file, line));
}

void throw_kernel_arg(const char* cond, const char* msg, const char* file, int line) {
  throw Error(ErrorKind::kInternal, fmt::format("check failed: {}: {} ({}:{})", cond, msg, file, line));
}

}  // namespace inferscale::detail
