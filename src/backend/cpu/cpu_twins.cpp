#include "backend/cpu/cpu_twins.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace inferscale::cpu {

void embedding(const float* embed, const int32_t* ids, float* x, int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; ++t) std::memcpy(x + t * H, embed + static_cast<int64_t>(ids[t]) * H, static_cast<size_t>(H) * 4);
}

void qkv_rope_append(const QkvRopeAppendRef& a, const Rope& rope) {
  const int64_t NH = a.num_heads, NKV = a.num_kv_heads, D = a.head_dim, heads = NH + 2 * NKV;
  std::vector<float> row(static_cast<size_t>(heads * D));
  std::vector<float> c(static_cast<size_t>(D / 2)), s(static_cast<size_t>(D / 2));
  for (int64_t t = 0; t < a.T; ++t) {
    std::memcpy(row.data(), a.qkv + t * heads * D, row.size() * 4);
    if (a.bias != nullptr)
      for (size_t i = 0; i < row.size(); ++i) row[i] += a.bias[i];
    float* q = row.data();
    float* k = q + NH * D;
    float* v = k + NKV * D;
    if (a.q_norm != nullptr) {
      rmsnorm(q, a.q_norm, q, NH, D, a.eps);
      rmsnorm(k, a.k_norm, k, NKV, D, a.eps);
    }
    if (a.capture_slot != nullptr && a.capture_slot[t] >= 0) {
      std::memcpy(a.k_pool + a.capture_slot[t] * NKV * D, k, static_cast<size_t>(NKV * D) * 4);
      std::memcpy(a.v_pool + a.capture_slot[t] * NKV * D, v, static_cast<size_t>(NKV * D) * 4);
    }
    rope.angles(a.positions[t], c.data(), s.data());
    rope.rotate_with(q, NH, c.data(), s.data());
    rope.rotate_with(k, NKV, c.data(), s.data());
    std::memcpy(a.q_out + t * NH * D, q, static_cast<size_t>(NH * D) * 4);
    std::memcpy(a.k_cache + a.slot_mapping[t] * NKV * D, k, static_cast<size_t>(NKV * D) * 4);
    std::memcpy(a.v_cache + a.slot_mapping[t] * NKV * D, v, static_cast<size_t>(NKV * D) * 4);
  }
}

void inject(const float* k_pool, const float* v_pool, float* k_cache, float* v_cache, int64_t pool_layer_stride,
            int64_t cache_layer_stride, const int64_t* src, const int64_t* dst, const int32_t* positions, int64_t N,
            int32_t num_layers, int32_t num_kv_heads, const Rope& rope) {
  const int64_t D = rope.head_dim(), row = num_kv_heads * D;
  std::vector<float> c(static_cast<size_t>(D / 2)), s(static_cast<size_t>(D / 2)), k(static_cast<size_t>(row));
  for (int64_t i = 0; i < N; ++i) {
    rope.angles(positions[i], c.data(), s.data());
    for (int32_t l = 0; l < num_layers; ++l) {
      std::memcpy(k.data(), k_pool + l * pool_layer_stride + src[i] * row, static_cast<size_t>(row) * 4);
      rope.rotate_with(k.data(), num_kv_heads, c.data(), s.data());
      std::memcpy(k_cache + l * cache_layer_stride + dst[i] * row, k.data(), static_cast<size_t>(row) * 4);
      std::memcpy(v_cache + l * cache_layer_stride + dst[i] * row, v_pool + l * pool_layer_stride + src[i] * row,
                  static_cast<size_t>(row) * 4);
    }
  }
}

void similarity_topk(const float* matrix, const float* query, int64_t N, int64_t D, int32_t k, int32_t* ids,
                     float* scores) {
  std::vector<double> sc(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(matrix[n * D + d]) * query[d];
    sc[static_cast<size_t>(n)] = acc;
  }
  std::vector<int32_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    const double sa = sc[static_cast<size_t>(a)], sb = sc[static_cast<size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  });
  for (int32_t i = 0; i < k; ++i) {
    ids[i] = order[static_cast<size_t>(i)];
    scores[i] = static_cast<float>(sc[static_cast<size_t>(ids[i])]);
  }
}

void argmax_rows(const float* logits, int64_t R, int64_t ld, int64_t n, int32_t* out) {
  for (int64_t r = 0; r < R; ++r) {
    const float* row = logits + r * ld;
    out[r] = static_cast<int32_t>(std::max_element(row, row + n) - row);
  }
}

void sample_rows(const float* logits, int64_t R, int64_t ld, int64_t n, const RowSampling* params, int32_t* out) {
  for (int64_t r = 0; r < R; ++r) out[r] = sample_row(logits + r * ld, n, params[r]);
}

}  // namespace inferscale::cpu
