// The FP8 projections' rules (BackendOptions::projections_fp8, --quantization fp8), one place for
// the GPU, which runs them (cuda_forward_ops.h: E4M3 codes, cuBLASLt's FP8 GEMM, W8A16 GEMVs),
// and the CPU, which emulates their numbers in f32 (cpu_forward_ops.h: the same rounding, for
// measuring what FP8 costs a model's answers on a machine without a GPU).
#pragma once
#include <cstdint>

namespace inferscale {

// Which matrices are stored in E4M3 (one scale for the whole, stacked, matrix): a shape cuBLASLt's
// FP8 GEMM takes. Others stay in the backend's precision.
inline bool fp8_projection_shape(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0;
}

// The W8A16 GEMVs' shapes (x kept as it is): the tensor-core one (gemv_e4m3_mma.cu) at up to
// kFp8MmaGemvMaxRows rows where K % 64 == 0, the CUDA-core one (gemv.cu) at up to
// kFp8CoreGemvMaxRows where K % 16 == 0.
inline constexpr int64_t kFp8MmaGemvMaxRows = 8;
inline constexpr int64_t kFp8CoreGemvMaxRows = 4;
// Rows up to which a forward's FP8 projections run a W8A16 GEMV (BackendOptions::fp8_w8a16_rows);
// above, x is rounded to E4M3 with one scale for the batch (W8A8: dynamic per-tensor, as vLLM's
// FP8) for cuBLASLt's FP8 GEMM.
inline constexpr int64_t kFp8W8A16Rows = 8;
inline bool fp8_keeps_x(int64_t M, int64_t K, int64_t w8a16_rows) {
  return M <= w8a16_rows && ((M <= kFp8MmaGemvMaxRows && K % 64 == 0) || (M <= kFp8CoreGemvMaxRows && K % 16 == 0));
}

}  // namespace inferscale
