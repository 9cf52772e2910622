#include "backend/cuda/gemm.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "util/check.h"

namespace inferscale {

namespace {
constexpr size_t kWorkspaceBytes = 64ull << 20;
constexpr int kTimedRuns = 5;
constexpr size_t kFlushBytes = 128ull << 20;  // over any L2 (the H200's is 50 MB)
constexpr int kSplits[] = {2, 3, 4, 6, 8, 12, 16};

// An algorithm's attribute of type T through `get` (cublasLtMatmulAlgoConfigGetAttribute for its
// configuration, cublasLtMatmulAlgoCapGetAttribute for its capabilities).
template <class T, class Attr>
T algo_attr(cublasStatus_t (*get)(const cublasLtMatmulAlgo_t*, Attr, void*, size_t, size_t*),
            const cublasLtMatmulAlgo_t& algo, Attr attr) {
  T v{};
  size_t written = 0;
  CUBLAS_CHECK(get(&algo, attr, &v, sizeof v, &written));
  return v;
}
template <class T>
T config_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  return algo_attr<T>(cublasLtMatmulAlgoConfigGetAttribute, algo, attr);
}
template <class T>
T cap_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  return algo_attr<T>(cublasLtMatmulAlgoCapGetAttribute, algo, attr);
}

}  // namespace

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

const Gemm::Plan& Gemm::plan(const void* x, const void* w, void* y, int64_t M, int64_t N, int64_t K, bool f32_out,
                             bool accumulate, cudaStream_t stream, bool e4m3) {
  const Key key{M, N, K, f32_out, accumulate, e4m3};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major views: A = w as [K, N] (ld K), B = x as [K, M] (ld K), C = y as [N, M] (ld N).
  const cudaDataType_t out_t = f32_out ? CUDA_R_32F : CUDA_R_16BF, in_t = e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in_t, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in_t, static_cast<uint64_t>(K), static_cast<uint64_t>(M), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_t, static_cast<uint64_t>(N), static_cast<uint64_t>(M), N));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t results[kMaxAlgosSplitK] = {};
  const int requested = !autotune_ ? 1 : split_k_ ? kMaxAlgosSplitK : kMaxAlgos;
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, requested, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(st);
  IS_CHECK(found > 0, "cuBLASLt has no algorithm for M={} N={} K={} f32_out={} accumulate={} e4m3={}", M, N, K,
           f32_out, accumulate, e4m3);
  p.algo = results[0].algo;
  if (autotune_) {
    std::vector<cublasLtMatmulAlgo_t> cands;
    for (int i = 0; i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      cands.push_back(results[i].algo);
      if (!split_k_ || config_attr<int32_t>(results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
      for (int s : kSplits) {
        if (s >= K / 128) break;  // at least 128 of K a split
        if (auto a = with_split_k(p, results[i].algo, s)) cands.push_back(*a);
      }
    }
    if (cands.size() > 1) p.algo = fastest(p, cands, x, w, y, M, N, f32_out, accumulate, stream);
  } else if (forced_splits_ > 1) {
    if (auto a = with_split_k(p, results[0].algo, forced_splits_)) p.algo = *a;
  }
  return plans_.emplace(key, p).first->second;
}

bool Gemm::runs(const Plan& p, const cublasLtMatmulAlgo_t& algo) const {
  cublasLtMatmulHeuristicResult_t r{};
  return cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &algo, &r) == CUBLAS_STATUS_SUCCESS &&
         r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= kWorkspaceBytes;
}

std::optional<cublasLtMatmulAlgo_t> Gemm::with_split_k(const Plan& p, const cublasLtMatmulAlgo_t& algo, int splits) {
  if (cap_attr<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) return std::nullopt;
  const uint32_t mask = cap_attr<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  // A reduction through the workspace (deterministic), in f32 where the algorithm offers it.
  const uint32_t compute = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, output = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const uint32_t scheme = (mask & compute) != 0 ? compute : (mask & output) != 0 ? output : 0u;
  if (scheme == 0) return std::nullopt;
  cublasLtMatmulAlgo_t a = algo;
  const int32_t s = splits;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof s));
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme));
  if (!runs(p, a)) return std::nullopt;
  return a;
}

std::string Gemm::describe(const void* x, const void* w, int64_t M, int64_t N, int64_t K, bool f32_out,
                           bool accumulate, cudaStream_t stream) {
  if (gemv_path(x, w, M, K)) return "gemv";
  const cublasLtMatmulAlgo_t& a = plan(x, w, nullptr, M, N, K, f32_out, accumulate, stream).algo;
  return fmt::format("algo {} tile {} stages {} splitK {} reduction {} swizzle {} cluster {}",
                     config_attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), config_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     config_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     config_attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     config_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                     config_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     config_attr<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

// Times each candidate on the real operands and returns the fastest (the median of kTimedRuns).
// The output: y itself when it is only written (the real GEMM overwrites it after), a scratch
// one when y is accumulated into or unknown (describe). Before each timed run a write of
// kFlushBytes evicts the weights from L2; only the GEMM itself is between the events.
cublasLtMatmulAlgo_t Gemm::fastest(const Plan& p, const std::vector<cublasLtMatmulAlgo_t>& cands, const void* x,
                                   const void* w, void* y, int64_t M, int64_t N, bool f32_out, bool accumulate,
                                   cudaStream_t stream) {
  const size_t out_bytes = static_cast<size_t>(M * N) * (f32_out ? 4 : 2);
  DeviceBuffer scratch, flush;
  void* out = y;
  if (accumulate || out == nullptr) {
    if (!scratch.try_resize(out_bytes)) return cands[0];
    CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, out_bytes, stream));
    out = scratch.data();
  }
  if (!flush.try_resize(kFlushBytes)) return cands[0];
  cudaEvent_t ev[2 * kTimedRuns] = {};
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  float best_ms = 1e30f;
  size_t best = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    auto once = [&] {
      return cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &cands[i],
                            workspace_.data(), kWorkspaceBytes, stream);
    };
    if (once() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
    for (int r = 0; r < kTimedRuns; ++r) {
      CUDA_CHECK(cudaMemsetAsync(flush.data(), r, kFlushBytes, stream));
      CUDA_CHECK(cudaEventRecord(ev[2 * r], stream));
      CUBLAS_CHECK(once());
      CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], stream));
    }
    CUDA_CHECK(cudaEventSynchronize(ev[2 * kTimedRuns - 1]));
    float ms[kTimedRuns] = {};
    for (int r = 0; r < kTimedRuns; ++r) CUDA_CHECK(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
    std::nth_element(ms, ms + kTimedRuns / 2, ms + kTimedRuns);
    if (ms[kTimedRuns / 2] < best_ms) {
      best_ms = ms[kTimedRuns / 2];
      best = i;
    }
  }
  for (cudaEvent_t e : ev) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the buffers are freed next
  return cands[best];
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
  const Plan& p = plan(x, w, y, M, N, K, f32_out, accumulate, stream);
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

void Gemm::run_e4m3(const uint8_t* x, const float* x_scale, const uint8_t* w, const float* w_scale, void* y,
                    bool f32_out, bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  IS_CHECK(e4m3_supports(N, K), "an E4M3 GEMM needs N and K multiples of 16 (N={} K={})", N, K);
  IS_CHECK(f32_out || !accumulate, "a GEMM accumulates into f32 outputs only");
  if (M == 0) return;
  const Plan& p = plan(x, w, y, M, N, K, f32_out, accumulate, stream, /*e4m3=*/true);
  // The scales of this call's operands (the plan is shared by every weight of this shape; the
  // attributes are read when the matmul is enqueued, and a graph keeps the pointers).
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                              workspace_.data(), kWorkspaceBytes, stream));
}

}  // namespace inferscale
