// An array the device keeps between forwards and uploads again only when it changes: the pool
// slots of facts read in place (ForwardBatch::fact_slots), which stay the same from one decode
// step to the next while the same requests run (100 x 2,506 slots, 1 MB, at 100 requests with
// k = 50). A change costs a host comparison and one copy; no change costs the comparison alone,
// and the device nothing.
//
//   host:    the last array uploaded, pinned  --cudaMemcpyAsync on the stream-->  device buffer
//
// The copy is queued on the forwards' stream: a forward already queued reads the array before it
// is replaced. The device buffer's address is held by captured graphs: it moves only when it
// grows (GraphState then sees a new address).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"

namespace inferscale {

template <class T>
class ResidentUpload {
 public:
  ResidentUpload() { CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming)); }
  ~ResidentUpload() { cudaEventDestroy(copied_); }
  ResidentUpload(const ResidentUpload&) = delete;
  ResidentUpload& operator=(const ResidentUpload&) = delete;

  // v on the device (queued on `stream` when it differs from the array uploaded last).
  const T* update(const std::vector<T>& v, cudaStream_t stream) {
    const size_t bytes = v.size() * sizeof(T);
    if (v.size() == n_ && std::memcmp(host_.as<char>(), v.data(), bytes) == 0) return dev_.as<T>();
    CUDA_CHECK(cudaEventSynchronize(copied_));  // the last copy out of host_ is done
    host_.reserve(std::max<size_t>(bytes, sizeof(T)));
    dev_.reserve(std::max<size_t>(bytes, sizeof(T)));
    if (bytes > 0) {
      std::memcpy(host_.as<char>(), v.data(), bytes);
      CUDA_CHECK(cudaMemcpyAsync(dev_.data(), host_.as<char>(), bytes, cudaMemcpyHostToDevice, stream));
    }
    CUDA_CHECK(cudaEventRecord(copied_, stream));
    n_ = v.size();
    ++uploads_;
    return dev_.as<T>();
  }
  const void* device_data() const { return dev_.data(); }
  int64_t uploads() const { return uploads_; }  // the updates that copied

 private:
  PinnedBuffer host_;
  DeviceBuffer dev_;
  size_t n_ = 0;
  int64_t uploads_ = 0;
  cudaEvent_t copied_ = nullptr;
};

}  // namespace inferscale
