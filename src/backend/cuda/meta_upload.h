// Per-forward metadata upload in one copy: arrays are packed at 256-byte aligned offsets into a
// pinned host buffer, copied to one device buffer, and addressed by the offsets.
//
//   pinned:  | token_ids | positions | slot_mapping | ... |   --one cudaMemcpyAsync-->  device
//
// The pinned buffer is reused: begin() waits for the previous upload's copy to finish.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"

namespace inferscale {

class MetaUpload {
 public:
  MetaUpload() { CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming)); }
  ~MetaUpload() { cudaEventDestroy(copied_); }
  MetaUpload(const MetaUpload&) = delete;
  MetaUpload& operator=(const MetaUpload&) = delete;

  // Starts a new pack of at most `max_bytes` (sum of array sizes + 256 per array).
  void begin(size_t max_bytes) {
    CUDA_CHECK(cudaEventSynchronize(copied_));  // the last copy out of the pinned buffer is done
    host_.reserve(max_bytes);
    dev_.reserve(max_bytes);
    size_ = 0;
  }
  // Appends n elements; returns their byte offset.
  template <class T>
  size_t add(const T* data, size_t n) {
    const size_t off = size_;
    if (n > 0) std::memcpy(host_.as<char>() + off, data, n * sizeof(T));
    size_ = off + (n * sizeof(T) + 255) / 256 * 256;
    return off;
  }
  template <class T>
  size_t add(const std::vector<T>& v) {
    return add(v.data(), v.size());
  }
  // Appends v in room for `capacity` >= v.size() elements: the offsets of what follows stay the
  // same for any size up to it (a CUDA graph's launches hold them).
  template <class T>
  size_t add(const std::vector<T>& v, size_t capacity) {
    const size_t off = add(v.data(), v.size());
    size_ = off + bytes<T>(std::max(capacity, v.size()));
    return off;
  }
  // The device buffer (its address is held by captured graphs).
  const void* device_data() const { return dev_.data(); }
  // Copies the pack to the device on `stream`.
  void upload(cudaStream_t stream) {
    if (size_ > 0) CUDA_CHECK(cudaMemcpyAsync(dev_.data(), host_.as<char>(), size_, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(copied_, stream));
  }
  template <class T>
  T* dev(size_t off) const {
    return reinterpret_cast<T*>(dev_.as<char>() + off);
  }
  // Bytes an array of n T takes in the pack.
  template <class T>
  static size_t bytes(size_t n) {
    return (n * sizeof(T) + 255) / 256 * 256;
  }

 private:
  PinnedBuffer host_;
  DeviceBuffer dev_;
  size_t size_ = 0;
  cudaEvent_t copied_ = nullptr;
};

}  // namespace inferscale
