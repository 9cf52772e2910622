// Weights on the GPU as CudaForwardOps prepares them: matrices bf16 (several checkpoint tensors
// stacked by rows when one GEMM serves several projections: wq; wk; wv), or FP8 E4M3 codes with
// one f32 scale for the whole matrix (--quantization fp8: quantized on the device from the bf16
// values, cuda::quantize_e4m3_tensor); vectors (norm weights, biases) f32. One allocation per
// weight (and per scale). Which tensors exist is the architecture's business
// (model/llama.cpp, model/bert.cpp), not this file's.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <initializer_list>

#include "backend/cuda/device_buffer.h"
#include "tensor/host_tensor.h"

namespace inferscale {

class DeviceWeightStore {
 public:
  // Converts (f32/f16/bf16/block-quantized -> bf16) and uploads the parts, stacked by rows;
  // rows/cols: the stacked shape.
  const __nv_bfloat16* matrix(std::initializer_list<const HostTensor*> parts, int64_t& rows, int64_t& cols);
  // f32 values of the parts, concatenated.
  const float* vector(std::initializer_list<const HostTensor*> parts, int64_t& n);
  // Benchmarks: seeded normal(0, std) bf16 made on the GPU (no host copy) / a vector of one value.
  const __nv_bfloat16* random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std);
  const float* filled_vector(int64_t n, float value);
  // The same matrices as E4M3 codes [rows, cols] and their scale (one f32, on the device): the
  // bf16 matrix goes through a temporary.
  struct Codes {
    const uint8_t* codes = nullptr;
    const float* scale = nullptr;
  };
  Codes matrix_e4m3(std::initializer_list<const HostTensor*> parts, int64_t& rows, int64_t& cols);
  Codes random_matrix_e4m3(int64_t rows, int64_t cols, uint64_t seed, float std);
  size_t bytes() const { return bytes_; }

  // The stacked shape of `parts` (checked).
  static void stacked_shape(std::initializer_list<const HostTensor*> parts, int64_t& rows, int64_t& cols);

 private:
  DeviceBuffer& take(size_t bytes);
  // The bf16 values of `parts` into `dst` ([rows, cols]).
  static void upload_bf16(std::initializer_list<const HostTensor*> parts, void* dst);
  Codes quantize(const DeviceBuffer& bf16_matrix, int64_t rows, int64_t cols);
  std::deque<DeviceBuffer> buffers_;
  size_t bytes_ = 0;
};

}  // namespace inferscale
