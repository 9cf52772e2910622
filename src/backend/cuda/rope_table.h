// Device cos/sin tables indexed by position, built on the host by Rope::angles (angles in
// double, then rounded to float: the same numbers the CPU backend rotates with). Grown on demand
// to a power of two >= 4096 positions, so a forward or an injection only uploads indices.
//   cos, sin: [capacity, head_dim / 2] f32
#pragma once
#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "model/rope.h"

namespace inferscale {

class RopeTable {
 public:
  explicit RopeTable(const ModelConfig& cfg) : rope_(cfg) {}
  // Makes positions [0, max_pos] available. Synchronous when it grows.
  void ensure(int64_t max_pos);
  const float* cos() const { return cos_.as<const float>(); }
  const float* sin() const { return sin_.as<const float>(); }
  int64_t capacity() const { return capacity_; }
  bool interleaved() const { return rope_.interleaved(); }
  const Rope& rope() const { return rope_; }

  // Host rows [0, n) of both tables, [n, head_dim / 2] each (exposed for tests).
  static void build_host(const Rope& rope, int64_t n, float* cos, float* sin);

 private:
  Rope rope_;
  int64_t capacity_ = 0;
  DeviceBuffer cos_, sin_;
};

}  // namespace inferscale
