// Linear layers through cuBLASLt (and cuda::gemv for one-row inputs): bf16 operands, f32
// accumulate, f32 or bf16 output.
//
//   y[M, N] (+)= x[M, K] @ w[N, K]^T        (row-major, w in HF [out, in] layout)
//
// cuBLASLt is column-major: the same memory is y^T [N, M] = w^T-op(A = w as [K, N]) * B (x as [K, M]),
// i.e. a "TN" GEMM with m = N, n = M, k = K. `accumulate` adds into y (beta = 1, f32 output only):
// the residual add of o_proj and down_proj happens inside the GEMM.
//
// Autotuning (off by default, set_autotune(true)): the first call of each shape times cuBLASLt's
// top 8 heuristic candidates on the real operands (into a scratch output) and keeps the fastest;
// the first call of a new shape then synchronises the stream. Measured on the H200 at
// Llama-3.1-8B shapes it gained nothing over the first heuristic (docs/BENCHMARKS.md), so the
// first heuristic is the default.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/device_buffer.h"

namespace inferscale {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t M, int64_t N, int64_t K, bool accumulate,
           cudaStream_t stream);
  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N, int64_t K,
           cudaStream_t stream);
  // Takes effect for shapes not planned yet.
  void set_autotune(bool on) { autotune_ = on; }
  // GEMMs of M <= rows (at most cuda::kGemvMaxRows) run cuda::gemv instead of cuBLASLt; 0: never.
  // Default 1: on the H200 at Llama-3.1-8B shapes gemv saves 1-1.4 us on qkv, o_proj and down at
  // M = 1 (loses 1.4 on gate_up) and loses at M = 4 (bench_cuda_kernels' GEMM table, BENCHMARKS.md).
  void set_gemv_max_rows(int64_t rows) { gemv_max_rows_ = rows; }
  // Whether run() takes cuda::gemv for these operands (CudaForwardOps fuses SiLU * up into it then).
  bool gemv_path(const void* x, const void* w, int64_t M, int64_t K) const;

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool>;  // M, N, K, f32 out, accumulate
  static constexpr int kMaxAlgos = 8;
  const Plan& plan(const void* x, const void* w, int64_t M, int64_t N, int64_t K, bool f32_out, bool accumulate,
                   cudaStream_t stream);
  cublasLtMatmulAlgo_t fastest(const Plan& p, const cublasLtMatmulHeuristicResult_t* cands, int n, const void* x,
                               const void* w, int64_t M, int64_t N, bool f32_out, bool accumulate, cudaStream_t stream);
  void launch(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out, bool accumulate,
              cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer scratch_;  // autotuning output
  bool autotune_ = false;
  int64_t gemv_max_rows_ = 1;
  std::map<Key, Plan> plans_;
};

}  // namespace inferscale
