#include "backend/cuda/device_weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "tensor/dtype.h"
#include "util/check.h"

namespace inferscale {
namespace {

using bf16 = __nv_bfloat16;

// Host staging of one upload: matrices go in chunks of whole rows (about 4M values: 16 MiB of
// f32, 8 MiB of bf16), so converting a large f16 or block-quantized tensor never holds a
// full-size f32 or bf16 copy of it.
class Uploader {
 public:
  explicit Uploader(void* dst) : dst_(static_cast<char*>(dst)) {}
  // `t` as bf16 at element `elem_offset` of the destination.
  void matrix(const HostTensor& t, int64_t elem_offset) {
    const int64_t row = t.row_size(), rows = t.num_rows();
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkValues / std::max<int64_t>(1, row));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0), n = nr * row;
      const size_t dst = static_cast<size_t>(elem_offset + r0 * row) * 2;
      if (t.dtype == DType::kBF16) {
        copy(t.as<const uint16_t>() + r0 * row, static_cast<size_t>(n) * 2, dst);
        continue;
      }
      f32_.resize(static_cast<size_t>(n));
      bf16_.resize(static_cast<size_t>(n));
      t.rows_to_f32(r0, nr, f32_.data());
      const float* f = f32_.data();
      uint16_t* h = bf16_.data();
#pragma omp parallel for schedule(static) if (n >= kChunkValues / 2)  // big chunks only, as convert_to_f32
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
      copy(bf16_.data(), static_cast<size_t>(n) * 2, dst);
    }
  }
  // `t` as f32 at element `elem_offset`.
  void vector(const HostTensor& t, int64_t elem_offset) {
    const HostTensor f = t.to_f32();
    copy(f.data, static_cast<size_t>(t.numel()) * 4, static_cast<size_t>(elem_offset) * 4);
  }

 private:
  void copy(const void* src, size_t bytes, size_t off) {
    CUDA_CHECK(cudaMemcpy(dst_ + off, src, bytes, cudaMemcpyHostToDevice));
  }
  static constexpr int64_t kChunkValues = int64_t{1} << 22;
  char* dst_;
  std::vector<float> f32_;      // one chunk's values as f32
  std::vector<uint16_t> bf16_;  // ... and as bf16
};

}  // namespace

DeviceBuffer& DeviceWeightStore::take(size_t bytes) {
  buffers_.emplace_back(bytes);
  bytes_ += bytes;
  return buffers_.back();
}

void DeviceWeightStore::stacked_shape(std::initializer_list<const HostTensor*> parts, int64_t& rows, int64_t& cols) {
  rows = 0;
  cols = -1;
  for (const HostTensor* p : parts) {
    IS_REQUIRE(p != nullptr && !p->empty(), kInvalidInput, "a weight matrix is missing");
    IS_REQUIRE(cols < 0 || p->row_size() == cols, kInvalidInput, "stacked weight parts differ in columns ({} vs {})",
               p->row_size(), cols);
    cols = p->row_size();
    rows += p->num_rows();
  }
}

void DeviceWeightStore::upload_bf16(std::initializer_list<const HostTensor*> parts, void* dst) {
  Uploader up(dst);
  int64_t at = 0;
  for (const HostTensor* p : parts) {
    up.matrix(*p, at);
    at += p->numel();
  }
}

const bf16* DeviceWeightStore::matrix(std::initializer_list<const HostTensor*> parts, int64_t& rows, int64_t& cols) {
  stacked_shape(parts, rows, cols);
  DeviceBuffer& buf = take(static_cast<size_t>(rows * cols) * 2);
  upload_bf16(parts, buf.data());
  return buf.as<bf16>();
}

DeviceWeightStore::Codes DeviceWeightStore::quantize(const DeviceBuffer& m, int64_t rows, int64_t cols) {
  DeviceBuffer row_amax(static_cast<size_t>(rows) * 4);
  DeviceBuffer& codes = take(static_cast<size_t>(rows * cols));
  DeviceBuffer& scale = take(4);
  cuda::quantize_e4m3_tensor(m.as<bf16>(), rows, cols, row_amax.as<float>(), codes.as<uint8_t>(), scale.as<float>(),
                             nullptr);  // legacy default stream
  CUDA_CHECK(cudaDeviceSynchronize());  // before the temporaries go
  return Codes{codes.as<uint8_t>(), scale.as<float>()};
}

DeviceWeightStore::Codes DeviceWeightStore::matrix_e4m3(std::initializer_list<const HostTensor*> parts, int64_t& rows,
                                                        int64_t& cols) {
  stacked_shape(parts, rows, cols);
  DeviceBuffer m(static_cast<size_t>(rows * cols) * 2);
  upload_bf16(parts, m.data());
  return quantize(m, rows, cols);
}

DeviceWeightStore::Codes DeviceWeightStore::random_matrix_e4m3(int64_t rows, int64_t cols, uint64_t seed, float std) {
  DeviceBuffer m(static_cast<size_t>(rows * cols) * 2);
  cuda::fill_random_bf16(m.as<bf16>(), rows * cols, seed, 0.0f, std, nullptr);
  return quantize(m, rows, cols);
}

const float* DeviceWeightStore::vector(std::initializer_list<const HostTensor*> parts, int64_t& n) {
  n = 0;
  for (const HostTensor* p : parts) {
    IS_REQUIRE(p != nullptr && !p->empty(), kInvalidInput, "a weight vector is missing");
    n += p->numel();
  }
  DeviceBuffer& buf = take(static_cast<size_t>(n) * 4);
  Uploader up(buf.data());
  int64_t at = 0;
  for (const HostTensor* p : parts) {
    up.vector(*p, at);
    at += p->numel();
  }
  return buf.as<float>();
}

const bf16* DeviceWeightStore::random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) {
  DeviceBuffer& buf = take(static_cast<size_t>(rows * cols) * 2);
  cuda::fill_random_bf16(buf.as<bf16>(), rows * cols, seed, 0.0f, std, nullptr);  // legacy default stream
  CUDA_CHECK(cudaDeviceSynchronize());
  return buf.as<bf16>();
}

const float* DeviceWeightStore::filled_vector(int64_t n, float value) {
  DeviceBuffer& buf = take(static_cast<size_t>(n) * 4);
  cuda::fill_f32(buf.as<float>(), n, value, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return buf.as<float>();
}

}  // namespace inferscale
