// A host tensor: dtype, shape and contiguous row-major data, either owned or a view into a
// memory-mapped file. `owner` keeps whatever backs `data` alive, so copies are cheap and safe.
// A row is the innermost dimension. For a block-quantized dtype (dtype.h) each row is a whole number
// of blocks: row_bytes() = (row_size / block values) x block bytes; a row that is not a multiple of
// the block size is an error wherever the size in bytes is asked for.
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
  int64_t row_size() const { return shape.empty() ? 1 : shape.back(); }  // values per row
  int64_t num_rows() const { return row_size() == 0 ? 0 : numel() / row_size(); }
  // Stored bytes of one row / of the whole tensor; kInvalidInput naming dtype and shape when a row
  // is not a whole number of blocks.
  size_t row_bytes() const;
  size_t nbytes() const { return static_cast<size_t>(num_rows()) * row_bytes(); }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i < 0 ? static_cast<int>(shape.size()) + i : i)); }
  template <class T>
  T* as() const { return static_cast<T*>(data); }

  // A new zero-filled tensor owning its storage.
  static HostTensor zeros(DType dtype, std::vector<int64_t> shape);
  // The same with storage left uninitialized: every byte must be written before it is read.
  static HostTensor uninitialized(DType dtype, std::vector<int64_t> shape);
  // A view of `data` (not owned; `owner` keeps it alive when given).
  static HostTensor view(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<void> owner = {});
  // The same values as float32 (a view when already f32, else a converted owned copy; block types
  // are dequantized).
  HostTensor to_f32() const;
  // Rows [first, first + count) as float32 into dst[count * row_size()].
  void rows_to_f32(int64_t first, int64_t count, float* dst) const;
  std::string shape_str() const;
};

}  // namespace inferscale
