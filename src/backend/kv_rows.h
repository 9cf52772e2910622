// Host copies of KV rows, what Backend::read_pool / write_pool / read_cache move: the K (or V) of
// N slots over every layer, in the backend's pool dtype (f32 on the CPU, bf16 on the GPU), so a
// copy never converts.   [layers, N, num_kv_heads * head_dim]
#pragma once
#include <cstdint>

#include "tensor/host_tensor.h"

namespace inferscale {

HostTensor make_kv_rows(DType dtype, int64_t layers, int64_t n, int64_t kv_size);
// kInternal naming `what` unless t is [layers, n, kv_size] of `dtype` with data.
void check_kv_rows(const HostTensor& t, DType dtype, int64_t layers, int64_t n, int64_t kv_size, const char* what);

}  // namespace inferscale
