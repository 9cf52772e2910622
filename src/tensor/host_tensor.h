// A host tensor: dtype, shape and contiguous row-major data, either owned or a view into a
// memory-mapped file. `owner` keeps whatever backs `data` alive, so copies are cheap and safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace inferscale {

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  std::shared_ptr<void> owner;

  bool empty() const { return data == nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i < 0 ? static_cast<int>(shape.size()) + i : i)); }
  template <class T>
  T* as() const { return static_cast<T*>(data); }

  // A new zero-filled tensor owning its storage.
  static HostTensor zeros(DType dtype, std::vector<int64_t> shape);
  // A view of `data` (not owned; `owner` keeps it alive when given).
  static HostTensor view(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner = {});
  // The same values as float32 (a view when already f32, else a converted owned copy).
  HostTensor to_f32() const;
  std::string shape_str() const;
};

}  // namespace inferscale
