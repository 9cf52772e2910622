#include "backend/cpu/cpu_linear_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "util/check.h"

namespace inferscale::cpu {
namespace {

// One (t, n) sum: 8 lanes over k = 0, 8, 16, ... (one FMA chain), the lanes added pairwise in a
// fixed order, then the K % 8 tail one product at a time. Independent chains come from the T rows
// of x, never from splitting one sum, so the order is the same for every T.
__attribute__((target("avx2,fma"))) inline float finish(__m256 acc, const float* x, const float* w, int64_t k,
                                                        int64_t K) {
  const __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s = _mm_add_ps(lo, hi);                 // lanes i + i + 4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));        // (0 + 2), (1 + 3)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x1));  // 0 + 1
  float r = _mm_cvtss_f32(s);
  for (; k < K; ++k) r = std::fma(x[k], w[k], r);
  return r;
}

// One weight row against T rows of x (T <= 8: T accumulators and the weight vector in registers).
template <int T>
__attribute__((target("avx2,fma"))) void row_against(const float* x, int64_t K, const float* wr, float* y, int64_t ldy) {
  const int64_t K8 = K & ~int64_t{7};
  __m256 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K8; k += 8) {
    const __m256 wv = _mm256_loadu_ps(wr + k);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * K + k), acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = finish(acc[t], x + t * K, wr, K8, K);
}

using RowFn = void (*)(const float*, int64_t, const float*, float*, int64_t);
constexpr RowFn kRowFns[9] = {nullptr,        row_against<1>, row_against<2>, row_against<3>, row_against<4>,
                              row_against<5>, row_against<6>, row_against<7>, row_against<8>};

}  // namespace

bool linear_rows_available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

void linear_rows(const float* x, int64_t T, int64_t K, const float* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  IS_CHECK(linear_rows_available(), "linear_rows needs AVX2 and FMA");
  IS_CHECK(T >= 1 && T <= kLinearRowsMax, "linear_rows takes 1 to {} rows, not {}", kLinearRowsMax, T);
  // Weight rows one at a time, as one sequential stream the prefetchers follow (2-4 rows at a
  // time, for more independent chains, measured slower); x in chunks of 8 rows, so a row read
  // for the first chunk is in L1 for the next.
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t t0 = 0; t0 < T; t0 += 8)
      kRowFns[std::min<int64_t>(8, T - t0)](x + t0 * K, K, w + n * K, y + t0 * ldy + n, ldy);
}

}  // namespace inferscale::cpu
