#include "backend/kv_rows.h"

#include "util/check.h"

namespace inferscale {

HostTensor make_kv_rows(DType dtype, int64_t layers, int64_t n, int64_t kv_size) {
  return HostTensor::uninitialized(dtype, {layers, n, kv_size});
}

void check_kv_rows(const HostTensor& t, DType dtype, int64_t layers, int64_t n, int64_t kv_size, const char* what) {
  const std::vector<int64_t> want{layers, n, kv_size};
  IS_CHECK(t.dtype == dtype && t.shape == want && (n == 0 || !t.empty()),
           "{}: KV rows {} {}, want {} [{}, {}, {}]", what, dtype_name(t.dtype), t.shape_str(), dtype_name(dtype), layers,
           n, kv_size);
}

}  // namespace inferscale
