#include "backend/cuda/gemm.h"

#include "backend/cuda/cuda_check.h"
#include "util/check.h"

namespace inferscale {

namespace {
constexpr size_t kWorkspaceBytes = 64ull << 20;
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

const Gemm::Plan& Gemm::plan(int64_t M, int64_t N, int64_t K, bool f32_out, bool accumulate) {
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(st);
  IS_CHECK(found > 0, "cuBLASLt has no algorithm for M={} N={} K={} f32_out={} accumulate={}", M, N, K, f32_out,
           accumulate);
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::launch(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out,
                  bool accumulate, cudaStream_t stream) {
  if (M == 0) return;
  const Plan& p = plan(M, N, K, f32_out, accumulate);
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
