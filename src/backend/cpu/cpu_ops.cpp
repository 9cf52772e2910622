#include "backend/cpu/cpu_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace inferscale::cpu {

void linear(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t in, int64_t out) {
  if (T == 0) return;
  if (T == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f, w,
                static_cast<int>(in), x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(out),
                static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), 0.0f, y,
                static_cast<int>(out));
  }
  if (bias != nullptr) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) y[t * out + o] += bias[o];
  }
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for if (rows > 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void paged_attention(const PagedAttentionArgs& a) {
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t T = a.q_indptr[a.num_seqs];
  const int64_t kv_row = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  // One task per (token, head); scores buffer per thread.
#pragma omp parallel
  {
    std::vector<float> scores;
    std::vector<float> acc(static_cast<size_t>(a.head_dim));
#pragma omp for schedule(dynamic, 4)
    for (int64_t th = 0; th < T * a.num_heads; ++th) {
      const int64_t t = th / a.num_heads;
      const int32_t h = static_cast<int32_t>(th % a.num_heads);
      const int32_t kvh = h / group;
      // Sequence of token t: last s with q_indptr[s] <= t.
      const int32_t s = static_cast<int32_t>(std::upper_bound(a.q_indptr, a.q_indptr + a.num_seqs + 1, t) - a.q_indptr) - 1;
      const int32_t* blocks = a.kv_indices + a.kv_indptr[s];
      const int64_t j0 = a.kv_start ? a.kv_start[s] : 0;
      const int64_t L = static_cast<int64_t>(a.positions[t]) + 1;
      const float* q = a.q + (t * a.num_heads + h) * a.head_dim;
      scores.resize(static_cast<size_t>(L));
      float mx = -INFINITY;
      for (int64_t j = j0; j < L; ++j) {
        const int64_t slot = static_cast<int64_t>(blocks[j / a.block_size]) * a.block_size + j % a.block_size;
        const float* k = a.k_cache + slot * kv_row + static_cast<int64_t>(kvh) * a.head_dim;
        float d = 0;
        for (int32_t i = 0; i < a.head_dim; ++i) d += q[i] * k[i];
        d *= a.scale;
        scores[static_cast<size_t>(j)] = d;
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (int64_t j = j0; j < L; ++j) {
        const float e = std::exp(scores[static_cast<size_t>(j)] - mx);
        scores[static_cast<size_t>(j)] = e;
        sum += e;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = j0; j < L; ++j) {
        const int64_t slot = static_cast<int64_t>(blocks[j / a.block_size]) * a.block_size + j % a.block_size;
        const float* v = a.v_cache + slot * kv_row + static_cast<int64_t>(kvh) * a.head_dim;
        const float p = scores[static_cast<size_t>(j)];
        for (int32_t i = 0; i < a.head_dim; ++i) acc[static_cast<size_t>(i)] += p * v[i];
      }
      float* o = a.out + (t * a.num_heads + h) * a.head_dim;
      const float inv = static_cast<float>(1.0 / sum);
      for (int32_t i = 0; i < a.head_dim; ++i) o[i] = acc[static_cast<size_t>(i)] * inv;
    }
  }
}

void scatter_rows(const float* src, const int64_t* slots, float* dst, int64_t n, int64_t row) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + slots[i] * row, src + i * row, static_cast<size_t>(row) * 4);
}

void gather_rows(const float* src, const int64_t* slots, float* dst, int64_t n, int64_t row) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * row, src + slots[i] * row, static_cast<size_t>(row) * 4);
}

}  // namespace inferscale::cpu
