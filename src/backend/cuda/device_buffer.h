// An owning, move-only device allocation (cudaMalloc), and a grow-only variant for per-forward
// workspaces. Sizes are in bytes; typed access through as<T>().
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace inferscale {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { resize(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  // Reallocates to exactly `bytes` (contents lost). The old allocation may be read by work still
  // queued (a forward launched beside another: Backend::launch_forward): the device finishes
  // that first.
  void resize(size_t bytes) {
    if (ptr_ != nullptr) CUDA_CHECK(cudaDeviceSynchronize());
    release();
    if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  // resize() that reports a failed allocation (out of device memory) as false, leaving the buffer
  // empty and no CUDA error pending, instead of throwing.
  bool try_resize(size_t bytes) {
    if (ptr_ != nullptr) CUDA_CHECK(cudaDeviceSynchronize());
    release();
    if (bytes == 0) return true;
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      ptr_ = nullptr;
      return false;
    }
    bytes_ = bytes;
    return true;
  }
  // Grows (contents lost) when smaller than `bytes`; keeps the allocation otherwise.
  void reserve(size_t bytes) {
    if (bytes > bytes_) resize(bytes + bytes / 4);
  }

  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; errors surface on the next call
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory for staging uploads and downloads (async copies need it).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    if (ptr_ != nullptr) CUDA_CHECK(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    bytes_ = bytes + bytes / 4;
    CUDA_CHECK(cudaMallocHost(&ptr_, bytes_));
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace inferscale
