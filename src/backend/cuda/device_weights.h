// Weights on the GPU as CudaForwardOps prepares them: matrices bf16 (several checkpoint tensors
// stacked by rows when one GEMM serves several projections: wq; wk; wv), vectors (norm weights,
// biases) f32. One allocation per weight. Which tensors exist is the architecture's business
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
  size_t bytes() const { return bytes_; }

 private:
  DeviceBuffer& take(size_t bytes);
  std::deque<DeviceBuffer> buffers_;
  size_t bytes_ = 0;
};

}  // namespace inferscale
