// Linear layers through cuBLASLt (and cuda::gemv for one-row inputs): bf16 operands, f32
// accumulate, f32 or bf16 output; or (run_e4m3, --quantization fp8) FP8 E4M3 operands with one
// f32 scale each, which cuBLASLt's Hopper FP8 kernels apply to the f32 sums (A_SCALE_POINTER,
// B_SCALE_POINTER: device scalars; a scale per row measured 1.1-1.5x slower, bench_cuda_kernels --gemm-fp8).
//
//   y[M, N] (+)= x[M, K] @ w[N, K]^T        (row-major, w in HF [out, in] layout)
//
// cuBLASLt is column-major: the same memory is y^T [N, M] = w^T-op(A = w as [K, N]) * B (x as [K, M]),
// i.e. a "TN" GEMM with m = N, n = M, k = K. `accumulate` adds into y (beta = 1, f32 output only):
// the residual add of o_proj and down_proj happens inside the GEMM.
//
// Every shape runs cuBLASLt's first heuristic. Measured on the H200 at Llama-3.1-8B shapes
// (bench_cuda_kernels' GEMM table): split-K variants of its top 16 gain nothing (it already splits K
// where that pays); the fastest of its top 8 timed at each M gains 0-7% at a mixed step's 136-1024
// rows (gate_up 7%, qkv 4%, o_proj and down ~1%) but costs a timing, and a stall, per new M; one
// timing reused over a bucket of 32 rows loses 1-12%, as cuBLASLt's kernels' speed jumps with M.
// Autotuning (off by default, benchmarks: set_autotune) times candidates on the real operands (into
// y itself, or a scratch output when y is accumulated into), the weights evicted from L2 before
// each run (as in a forward, where 16 GB pass between two uses of one layer), and keeps the lowest
// median of 5; the first call of a shape then synchronises the stream, so it must not meet a graph
// capture. With split-K candidates the reduction goes through the workspace (deterministic).
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
#include "backend/fp8_projections.h"

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
  // y[M, N] (+)= (x_codes * x_scale) (w_codes * w_scale)^T: E4M3 codes, scales one f32 each on the
  // device; y f32 (accumulate allowed) or bf16. Needs K % 16 == 0 and N % 16 == 0 (e4m3_supports).
  void run_e4m3(const uint8_t* x, const float* x_scale, const uint8_t* w, const float* w_scale, void* y, bool f32_out,
                bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t stream);
  static bool e4m3_supports(int64_t N, int64_t K) { return fp8_projection_shape(N, K); }
  // The settings below take effect for shapes not planned yet.
  // Every shape timed at its own M (with split-K candidates too if `split_k`).
  void set_autotune(bool on, bool split_k = false) {
    autotune_ = on;
    split_k_ = on && split_k;
  }
  // Plans take cuBLASLt's first heuristic with K split `splits` ways (the deterministic reduction)
  // where it supports that, and as it is where not; 0 or 1: as the heuristic says (tests).
  void set_split_k(int splits) { forced_splits_ = splits; }
  // GEMMs of M <= rows (at most cuda::kGemvMaxRows) run cuda::gemv instead of cuBLASLt; 0: never.
  // Default 1: on the H200 at Llama-3.1-8B shapes gemv saves 1-1.4 us on qkv, o_proj and down at
  // M = 1 (loses 1.4 on gate_up) and loses at M = 4 (bench_cuda_kernels' GEMM table).
  void set_gemv_max_rows(int64_t rows) { gemv_max_rows_ = rows; }
  // Whether run() takes cuda::gemv for these operands (CudaForwardOps fuses SiLU * up into it then).
  bool gemv_path(const void* x, const void* w, int64_t M, int64_t K) const;
  // The algorithm a shape runs (planned now if it is not yet, into a scratch output), as "algo A
  // tile T stages S splitK K reduction R swizzle W cluster C" (cuBLASLt's config ids), or "gemv".
  std::string describe(const void* x, const void* w, int64_t M, int64_t N, int64_t K, bool f32_out, bool accumulate,
                       cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool>;  // M, N, K, f32 out, accumulate, E4M3 inputs
  static constexpr int kMaxAlgos = 8;
  static constexpr int kMaxAlgosSplitK = 16;
  const Plan& plan(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out,
                   bool accumulate, cudaStream_t stream, bool e4m3 = false);
  // The fastest of `cands` on these operands (the first where the timing's buffers do not fit in
  // the device's memory).
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
  int64_t gemv_max_rows_ = 1;
  std::map<Key, Plan> plans_;
};

}  // namespace inferscale
