#include "backend/cuda/gemm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "util/check.h"

namespace inferscale {

namespace {
constexpr size_t kWorkspaceBytes = 64ull << 20;
constexpr int kTimedRuns = 3;
}

Gemm::Gemm() {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_.resize(kWorkspaceBytes);
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

const Gemm::Plan& Gemm::plan(const void* x, const void* w, int64_t M, int64_t N, int64_t K, bool f32_out,
                             bool accumulate, cudaStream_t stream) {
  const Key key{M, N, K, f32_out, accumulate};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major views: A = w as [K, N] (ld K), B = x as [K, M] (ld K), C = y as [N, M] (ld N).
  const cudaDataType_t out_t = f32_out ? CUDA_R_32F : CUDA_R_16BF;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, static_cast<uint64_t>(K), static_cast<uint64_t>(M), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_t, static_cast<uint64_t>(N), static_cast<uint64_t>(M), N));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t results[kMaxAlgos] = {};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, autotune_ ? kMaxAlgos : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(st);
  IS_CHECK(found > 0, "cuBLASLt has no algorithm for M={} N={} K={} f32_out={} accumulate={}", M, N, K, f32_out,
           accumulate);
  p.algo = results[0].algo;
  if (autotune_ && found > 1) p.algo = fastest(p, results, found, x, w, M, N, f32_out, accumulate, stream);
  return plans_.emplace(key, p).first->second;
}

// Times each candidate on the real operands, writing a scratch output (the real one may be
// accumulated into), and returns the fastest. Runs once per shape.
cublasLtMatmulAlgo_t Gemm::fastest(const Plan& p, const cublasLtMatmulHeuristicResult_t* cands, int n, const void* x,
                                   const void* w, int64_t M, int64_t N, bool f32_out, bool accumulate,
                                   cudaStream_t stream) {
  scratch_.reserve(static_cast<size_t>(M * N) * (f32_out ? 4 : 2));
  CUDA_CHECK(cudaMemsetAsync(scratch_.data(), 0, static_cast<size_t>(M * N) * (f32_out ? 4 : 2), stream));
  cudaEvent_t a = nullptr, b = nullptr;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  float best_ms = 1e30f;
  int best = 0;
  for (int i = 0; i < n; ++i) {
    auto once = [&] {
      return cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, scratch_.data(), p.c, scratch_.data(), p.c,
                            &cands[i].algo, workspace_.data(), kWorkspaceBytes, stream);
    };
    if (cands[i].state != CUBLAS_STATUS_SUCCESS || once() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
    CUDA_CHECK(cudaEventRecord(a, stream));
    for (int r = 0; r < kTimedRuns; ++r) CUBLAS_CHECK(once());
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return cands[best].algo;
}

bool Gemm::gemv_path(const void* x, const void* w, int64_t M, int64_t K) const {
  return M <= gemv_max_rows_ && cuda::gemv_supports(M, K, x, w);
}

void Gemm::launch(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out,
                  bool accumulate, cudaStream_t stream) {
  if (M == 0) return;
  if (gemv_path(x, w, M, K)) {
    cuda::gemv(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), y, f32_out, accumulate, M, N,
               K, stream);
    return;
  }
  const Plan& p = plan(x, w, M, N, K, f32_out, accumulate, stream);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                              workspace_.data(), kWorkspaceBytes, stream));
}

void Gemm::run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t M, int64_t N, int64_t K,
               bool accumulate, cudaStream_t stream) {
  launch(x, w, y, M, N, K, true, accumulate, stream);
}

void Gemm::run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N, int64_t K,
               cudaStream_t stream) {
  launch(x, w, y, M, N, K, false, false, stream);
}

}  // namespace inferscale
