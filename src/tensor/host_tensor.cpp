#include "tensor/host_tensor.h"

#include <cstdlib>
#include <cstring>

#include "util/check.h"

namespace inferscale {

size_t HostTensor::row_bytes() const {
  const BlockShape b = dtype_block(dtype);
  IS_REQUIRE(row_size() % b.elems == 0, kInvalidInput,
             "a {} tensor of shape {}: its rows of {} values are not a whole number of {}-value blocks",
             dtype_name(dtype), shape_str(), row_size(), b.elems);
  return dtype_bytes(dtype, row_size());
}

HostTensor HostTensor::uninitialized(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const size_t bytes = t.nbytes();
  // 64-byte alignment for vector loads; at least one byte so data is never null.
  void* p = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
  IS_REQUIRE(p != nullptr, kResource, "out of host memory allocating {} bytes", bytes);
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return t;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t = uninitialized(dtype, std::move(shape));
  std::memset(t.data, 0, t.nbytes());
  return t;
}

HostTensor HostTensor::view(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  t.owner = std::move(owner);
  return t;
}

HostTensor HostTensor::to_f32() const {
  if (dtype == DType::kF32) return *this;
  HostTensor out = uninitialized(DType::kF32, shape);
  rows_to_f32(0, num_rows(), out.as<float>());
  return out;
}

void HostTensor::rows_to_f32(int64_t first, int64_t count, float* dst) const {
  IS_CHECK(first >= 0 && count >= 0 && first + count <= num_rows(), "rows [{}, {}) of a tensor of shape {}", first,
           first + count, shape_str());
  const size_t rb = row_bytes();
  convert_to_f32(dtype, static_cast<const uint8_t*>(data) + static_cast<size_t>(first) * rb, dst,
                 static_cast<size_t>(count * row_size()));
}

std::string HostTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace inferscale
