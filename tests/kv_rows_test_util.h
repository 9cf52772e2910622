// Tests compare KV in f32: a backend's KV rows (backend/kv_rows.h, in its pool dtype) as float
// vectors, and float vectors written into its pool in its dtype.
#pragma once
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "tensor/host_tensor.h"

namespace inferscale::test {

inline std::vector<float> f32_values(const HostTensor& t) {
  const HostTensor f = t.to_f32();
  return std::vector<float>(f.as<float>(), f.as<float>() + f.numel());
}

inline void read_pool_f32(Backend& b, const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) {
  HostTensor hk, hv;
  b.read_pool(slots, hk, hv);
  k = f32_values(hk);
  v = f32_values(hv);
}

inline void read_cache_f32(Backend& b, const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) {
  HostTensor hk, hv;
  b.read_cache(slots, hk, hv);
  k = f32_values(hk);
  v = f32_values(hv);
}

// k, v: [layers, slots, kv_size] floats, rounded to the pool's dtype (bf16 or kept f32).
inline void write_pool_f32(Backend& b, const std::vector<int64_t>& slots, const std::vector<float>& k,
                           const std::vector<float>& v) {
  const std::vector<int64_t> shape{b.config().num_layers, static_cast<int64_t>(slots.size()), b.config().kv_size()};
  auto in_pool = [&](const std::vector<float>& x) {
    HostTensor t = HostTensor::uninitialized(b.pool_dtype(), shape);
    convert_from_f32(b.pool_dtype(), x.data(), t.data, x.size());
    return t;
  };
  b.write_pool(slots, in_pool(k), in_pool(v));
}

}  // namespace inferscale::test
