// The FP8 projections' rules (BackendOptions::projections_fp8, --quantization fp8), one place for
// the GPU, which runs them (cuda_forward_ops.h: E4M3 codes, x quantized per forward with one scale,
// cuBLASLt's FP8 GEMM),
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

}  // namespace inferscale
