#include "backend/cpu/cpu_ops.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/fp8.h"

namespace inferscale::cpu {
namespace {

// exp(x) for x <= 0 (softmax after subtracting the row maximum), branch-free so the loop
// vectorizes (this file builds with -O3): Cody-Waite reduction x = n ln2 + r, Cephes' degree-6
// polynomial for exp(r), 2^n from the exponent bits. Relative error below 2e-7 against std::exp.
// x is clamped to -87 in the integer domain: for x <= 0 (+0 and -0 included) a larger magnitude
// has larger unsigned bits.
inline float exp_nonpositive(float x) {
  constexpr uint32_t kLimit = std::bit_cast<uint32_t>(-87.0f);
  uint32_t bx = std::bit_cast<uint32_t>(x);
  bx = bx > kLimit ? kLimit : bx;
  x = std::bit_cast<float>(bx);
  const float n = static_cast<float>(static_cast<int32_t>(x * 1.44269504088896341f - 0.5f));  // round(x / ln2)
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

}  // namespace

void linear(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t in, int64_t out) {
  linear(x, w, bias, y, T, in, out, out);
}

void linear(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t in, int64_t out, int64_t ldy) {
  if (T == 0) return;
  if (T == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f, w,
                static_cast<int>(in), x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(out),
                static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), 0.0f, y,
                static_cast<int>(ldy));
  }
  if (bias != nullptr) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) y[t * ldy + o] += bias[o];
  }
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t dim, float eps,
                ThreadPool* pool) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(dim);
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + b[i];
    }
  };
  if (pool) pool->parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, dim)), body);
  else body(0, rows);
}

void gelu(float* x, int64_t n, ThreadPool* pool) {
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
  };
  if (pool) pool->parallel_for(n, 32768, body);
  else body(0, n);
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps, ThreadPool* pool) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
    }
  };
  if (pool) pool->parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, dim)), body);
  else body(0, rows);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n, ThreadPool* pool) {
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  };
  if (pool) pool->parallel_for(n, 32768, body);
  else body(0, n);
}

namespace {

// K and V of (slot, kv head g) of one layer into kd, vd [D] (vd null: K only).
void read_kv_row(const KvLayerRows& r, int64_t slot, int32_t g, int32_t num_kv_heads, int64_t D, float* kd, float* vd) {
  const int64_t row = slot * num_kv_heads + g;
  if (r.k != nullptr) {
    std::memcpy(kd, r.k + row * D, static_cast<size_t>(D) * 4);
    if (vd) std::memcpy(vd, r.v + row * D, static_cast<size_t>(D) * 4);
  } else {
    dequantize_e4m3_row(r.k_codes + row * D, D, r.k_scales[row], kd);
    if (vd) dequantize_e4m3_row(r.v_codes + row * D, D, r.v_scales[row], vd);
  }
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a, ThreadPool* pool) {
  // Per (sequence, kv head): gather the sequence's K and V into contiguous [L, D] panels, then
  // scores = Q K^T and out = softmax(scores) V as two GEMMs over the query rows of that kv head
  // (the `group` q heads of every token). Rows past a token's position are masked to zero weight,
  // so a row's result does not depend on which other tokens share the batch.
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t D = a.head_dim;
  constexpr int64_t kRowChunk = 256;  // query rows per GEMM: bounds the score matrix
  // Panels reused across calls (no page faults per layer), one set per calling thread. The
  // references matter: the softmax lambda runs on pool threads and must see the caller's set.
  struct Panels {
    std::vector<float> kp, vp, qp, sc, op;
  };
  static thread_local Panels panels;
  // Plain references, not a structured binding: lambdas below capture them (clang before 16
  // cannot capture a binding).
  std::vector<float>& kp = panels.kp;
  std::vector<float>& vp = panels.vp;
  std::vector<float>& qp = panels.qp;
  std::vector<float>& sc = panels.sc;
  std::vector<float>& op = panels.op;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int32_t t0 = a.q_indptr[s], t1 = a.q_indptr[s + 1];
    if (t0 == t1) continue;
    const int32_t* blocks = a.kv_indices + a.kv_indptr[s];
    const int64_t j0 = a.kv_start ? a.kv_start[s] : 0;
    int64_t L = 0;  // entries [j0, L) are read by some token of this sequence
    for (int32_t t = t0; t < t1; ++t) L = std::max<int64_t>(L, static_cast<int64_t>(a.positions[t]) + 1);
    // The last entry token t reads: its own (causal) or the sequence's last in this batch.
    auto last = [&](int64_t t) { return a.causal ? static_cast<int64_t>(a.positions[t]) : L - 1; };
    kp.resize(static_cast<size_t>((L - j0) * D));
    vp.resize(static_cast<size_t>((L - j0) * D));
    const KvLayerRows cache{a.k_cache, a.v_cache, a.k_codes, a.v_codes, a.k_scales, a.v_scales};
    // In-place facts: entries [fa, fb) come from pool slots facts.slots[f0 + j - fa].
    const FactsInPlace& fx = a.facts;
    const int64_t fa = fx.indptr ? fx.start[s] : 0, fb = fx.indptr ? fa + fx.indptr[s + 1] - fx.indptr[s] : 0;
    const int64_t f0 = fx.indptr ? fx.indptr[s] : 0, half = D / 2;
    for (int32_t g = 0; g < a.num_kv_heads; ++g) {
      for (int64_t j = j0; j < L; ++j) {
        float* kd = &kp[static_cast<size_t>((j - j0) * D)];
        float* vd = &vp[static_cast<size_t>((j - j0) * D)];
        if (j >= fa && j < fb) {  // a fact's pre-RoPE key, rotated at its serving position j
          read_kv_row(fx.pool, fx.slots[f0 + j - fa], g, a.num_kv_heads, D, kd, vd);
          fx.rope->rotate_with(kd, 1, fx.cos + j * half, fx.sin + j * half);
          continue;
        }
        const int64_t slot = static_cast<int64_t>(blocks[j / a.block_size]) * a.block_size + j % a.block_size;
        read_kv_row(cache, slot, g, a.num_kv_heads, D, kd, vd);
      }
      // Query rows of this kv head: row r = (token t0 + r / group, head g * group + r % group).
      const int64_t rows = static_cast<int64_t>(t1 - t0) * group;
      for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
        const int64_t nr = std::min(kRowChunk, rows - r0);
        qp.resize(static_cast<size_t>(nr * D));
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t t = t0 + (r0 + r) / group, h = static_cast<int64_t>(g) * group + (r0 + r) % group;
          std::memcpy(&qp[static_cast<size_t>(r * D)], a.q + (t * a.num_heads + h) * D, static_cast<size_t>(D) * 4);
        }
        // Columns past the chunk's last position are masked for every row in it: skip them.
        const int64_t n = last(t0 + (r0 + nr - 1) / group) + 1 - j0;
        sc.resize(static_cast<size_t>(nr * n));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nr), static_cast<int>(n), static_cast<int>(D),
                    a.scale, qp.data(), static_cast<int>(D), kp.data(), static_cast<int>(D), 0.0f, sc.data(), static_cast<int>(n));
        auto softmax_rows = [&](int64_t rb, int64_t re) {
          for (int64_t r = rb; r < re; ++r) {
            const int64_t t = t0 + (r0 + r) / group;
            const int64_t valid = last(t) + 1 - j0;  // entries j0 .. last
            float* row = &sc[static_cast<size_t>(r * n)];
            float mx = -INFINITY;
            for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, row[j]);
            for (int64_t j = 0; j < valid; ++j) row[j] = exp_nonpositive(row[j] - mx);
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < valid; ++j) sum += row[j];
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
            for (int64_t j = valid; j < n; ++j) row[j] = 0.0f;
          }
        };
        if (pool) pool->parallel_for(nr, 8, softmax_rows);
        else softmax_rows(0, nr);
        op.resize(static_cast<size_t>(nr * D));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nr), static_cast<int>(D), static_cast<int>(n),
                    1.0f, sc.data(), static_cast<int>(n), vp.data(), static_cast<int>(D), 0.0f, op.data(), static_cast<int>(D));
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t t = t0 + (r0 + r) / group, h = static_cast<int64_t>(g) * group + (r0 + r) % group;
          std::memcpy(a.out + (t * a.num_heads + h) * D, &op[static_cast<size_t>(r * D)], static_cast<size_t>(D) * 4);
        }
      }
    }
  }
}

void attention_mass(const AttentionMassArgs& a, float* mass) {
  const AttentionMassShape& s = a.s;
  const int64_t D = s.head_dim, nk = s.keys();
  const int32_t group = s.num_heads / s.num_kv_heads;
  std::vector<float> k(static_cast<size_t>(D)), logits;
  for (int32_t r = 0; r < s.rows; ++r) {
    const int64_t last = a.positions[r];  // entries [kv_start, last]
    logits.resize(static_cast<size_t>(last + 1 - s.kv_start));
    for (int32_t h = 0; h < s.num_heads; ++h) {
      const float* q = a.q + (static_cast<int64_t>(r) * s.num_heads + h) * D;
      float mx = -INFINITY;
      for (int64_t i = s.kv_start; i <= last; ++i) {
        const int64_t slot = static_cast<int64_t>(a.blocks[i / s.block_size]) * s.block_size + i % s.block_size;
        read_kv_row(a.cache, slot, h / group, s.num_kv_heads, D, k.data(), nullptr);
        float dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[d] * k[static_cast<size_t>(d)];
        float& l = logits[static_cast<size_t>(i - s.kv_start)];
        l = dot * s.scale;
        mx = std::max(mx, l);
      }
      double sum = 0;
      for (float& l : logits) sum += std::exp(static_cast<double>(l - mx));
      for (int64_t j = s.key_begin; j < std::min<int64_t>(s.key_end, last + 1); ++j)
        mass[r * nk + (j - s.key_begin)] +=
            static_cast<float>(std::exp(static_cast<double>(logits[static_cast<size_t>(j - s.kv_start)] - mx)) / sum);
    }
  }
}

}  // namespace inferscale::cpu
