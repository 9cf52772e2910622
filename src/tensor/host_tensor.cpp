#include "tensor/host_tensor.h"

#include <cstdlib>
#include <cstring>

#include "util/check.h"

namespace inferscale {

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const size_t bytes = t.nbytes();
  // 64-byte alignment for vector loads; at least one byte so data is never null.
  void* p = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
  IS_REQUIRE(p != nullptr, kResource, "out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, bytes);
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
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
  HostTensor out = zeros(DType::kF32, shape);
  convert_to_f32(dtype, data, out.as<float>(), static_cast<size_t>(numel()));
  return out;
}

std::string HostTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace inferscale
