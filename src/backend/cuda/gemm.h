// Linear layers through cuBLASLt (and cuda::gemv for one-row inputs): bf16 operands, f32
// accumulate, f32 or bf16 output.
//
//   y[M, N] (+)= x[M, K] @ w[N, K]^T        (row-major, w in HF [out, in] layout)
//
// cuBLASLt is column-major: the same memory is y^T [N, M] = w^T-op(A = w as [K, N]) * B (x as [K, M]),
// i.e. a "TN" GEMM with m = N, n = M, k = K. `accumulate` adds into y (beta = 1, f32 output only):
// the residual add of o_proj and down_proj happens inside the GEMM.
//
// Which cuBLASLt algorithm a shape runs:
//   M < tuned_min_rows   cuBLASLt's first heuristic. At these sizes its top 8, and split-K
//                        variants of its top 16, gain nothing measurable (docs/BENCHMARKS.md run 24).
//   M >= tuned_min_rows  the fastest of its top 8, timed once per (row bucket, N, K, output):
//                        at the first M of a bucket that runs, the others of the bucket reuse it.
//                        The first heuristic is far from the best there (gate_up at M = 448:
//                        277 us against 158, run 24), and a mixed step's rows take any value, so
//                        a bucket (256, 384, 512, 768, 1024, ... rows: a factor 1.33-1.5) shares
//                        one timing. The default 257 is above every CUDA-graph bucket
//                        (graph_batch.h), so a timing, which synchronises the stream, never
//                        meets a capture (one that does takes the heuristic).
// A timing runs each candidate on the real operands (into y itself, or a scratch output when y
// is accumulated into), the weights evicted from L2 before each run (as in a forward, where 16 GB
// pass between two uses of one layer), and keeps the lowest median of 5. Its buffers are
// allocated for it and freed after it; where the device has no memory for them the bucket keeps
// the heuristic.
// set_autotune(true) times every shape at its own M instead (benchmarks), with split-K variants
// too when asked (a deterministic reduction through the workspace, never in place).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/device_buffer.h"

namespace inferscale {

class Gemm {
 public:
  static constexpr int64_t kDefaultTunedMinRows = 257;

  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t M, int64_t N, int64_t K, bool accumulate,
           cudaStream_t stream);
  void run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N, int64_t K,
           cudaStream_t stream);
  // The settings below take effect for shapes not planned yet.
  // Every shape timed at its own M (and with split-K candidates if `split_k`).
  void set_autotune(bool on, bool split_k = false) {
    autotune_ = on;
    split_k_ = on && split_k;
  }
  // Rows from which a shape's algorithm is timed per row bucket (above); 0: never.
  void set_tuned_min_rows(int64_t rows) { tuned_min_rows_ = rows; }
  // Plans below tuned_min_rows take cuBLASLt's first heuristic with K split `splits` ways (the
  // deterministic reduction) where it supports that, and as it is where not; 0 or 1: as the
  // heuristic says.
  void set_split_k(int splits) { forced_splits_ = splits; }
  // GEMMs of M <= rows (at most cuda::kGemvMaxRows) run cuda::gemv instead of cuBLASLt; 0: never.
  // Default 1: on the H200 at Llama-3.1-8B shapes gemv saves 1-1.4 us on qkv, o_proj and down at
  // M = 1 (loses 1.4 on gate_up) and loses at M = 4 (bench_cuda_kernels' GEMM table, BENCHMARKS.md).
  void set_gemv_max_rows(int64_t rows) { gemv_max_rows_ = rows; }
  // Whether run() takes cuda::gemv for these operands (CudaForwardOps fuses SiLU * up into it then).
  bool gemv_path(const void* x, const void* w, int64_t M, int64_t K) const;
  // The algorithm a shape runs (planned now if it is not yet, into a scratch output), as "algo A
  // tile T stages S splitK K reduction R swizzle W cluster C" (cuBLASLt's config ids), or "gemv".
  std::string describe(const void* x, const void* w, int64_t M, int64_t N, int64_t K, bool f32_out, bool accumulate,
                       cudaStream_t stream);
  // M's row bucket, the rows one timing serves: M rounded up to a multiple of 32 below 1024 rows,
  // of 64 below 2048, 128 below 4096, ... (at most ~6% of M).
  static int64_t row_bucket(int64_t M);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool>;  // M (or its bucket), N, K, f32 out, accumulate
  static constexpr int kMaxAlgos = 8;
  static constexpr int kMaxAlgosSplitK = 16;
  const Plan& plan(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out,
                   bool accumulate, cudaStream_t stream);
  // The fastest of `cands` on these operands (the first where the timing's buffers do not fit).
  cublasLtMatmulAlgo_t fastest(const Plan& p, const std::vector<cublasLtMatmulAlgo_t>& cands, const void* x,
                               const void* w, void* y, int64_t M, int64_t N, bool f32_out, bool accumulate,
                               cudaStream_t stream);
  // `algo` with K split `splits` ways, or nothing where it does not support that (or needs more
  // workspace than there is).
  std::optional<cublasLtMatmulAlgo_t> with_split_k(const Plan& p, const cublasLtMatmulAlgo_t& algo, int splits);
  bool runs(const Plan& p, const cublasLtMatmulAlgo_t& algo) const;  // cublasLtMatmulAlgoCheck
  void launch(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out, bool accumulate,
              cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  bool autotune_ = false;
  bool split_k_ = false;
  int forced_splits_ = 0;
  int64_t tuned_min_rows_ = kDefaultTunedMinRows;
  int64_t gemv_max_rows_ = 1;
  std::map<Key, Plan> plans_;                   // by exact M
  std::map<Key, cublasLtMatmulAlgo_t> tuned_;  // by row bucket (M >= tuned_min_rows_)
};

}  // namespace inferscale
