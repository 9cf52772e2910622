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

// Rows a W8A16 GEMV takes (x kept as it is): the CUDA-core GEMV at one row where K % 16 == 0
// (0.92x bf16's time on the H100; at 2 and 4 rows it took 1.5x and 2.6x, docs/BENCHMARKS.md run
// 26). Above, x is rounded to E4M3 with one scale for the batch (W8A8: dynamic per-tensor, as
// vLLM's FP8). The tensor-core GEMV (gemv_e4m3_mma.cu, 1-8 rows) joins the forward only once its
// parity and speed are measured on a GPU (Gemm::set_e4m3_mma_gemv).
inline constexpr int64_t kFp8GemvMaxRows = 1;
inline bool fp8_keeps_x(int64_t M, int64_t K) { return M <= kFp8GemvMaxRows && K % 16 == 0; }

}  // namespace inferscale
