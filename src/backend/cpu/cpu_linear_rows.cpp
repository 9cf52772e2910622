#include "backend/cpu/cpu_linear_rows.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tensor/quant.h"
#include "util/check.h"

namespace inferscale::cpu {
namespace {

// The 8 lanes of one (t, n) sum (one FMA chain over k = 0, 8, 16, ...), added pairwise in a fixed
// order. Independent chains come from the T rows of x, never from splitting one sum, so the order
// is the same for every T.
__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 acc) {
  const __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s = _mm_add_ps(lo, hi);                 // lanes i + i + 4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));        // (0 + 2), (1 + 3)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x1));  // 0 + 1
  return _mm_cvtss_f32(s);
}

// One weight row against T rows of x (T <= 8: T accumulators and the weight vector in registers).
template <int T>
__attribute__((target("avx2,fma,f16c"))) void row_against(const float* x, int64_t K, const float* wr, float* y, int64_t ldy) {
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
  for (int t = 0; t < T; ++t) {
    float r = hsum(acc[t]);
    for (int64_t k = K8; k < K; ++k) r = std::fma(x[t * K + k], wr[k], r);  // the K % 8 tail, in order
    y[t * ldy] = r;
  }
}

using RowFn = void (*)(const float*, int64_t, const float*, float*, int64_t);
constexpr RowFn kRowFns[9] = {nullptr,        row_against<1>, row_against<2>, row_against<3>, row_against<4>,
                              row_against<5>, row_against<6>, row_against<7>, row_against<8>};

// 32 quants of a block as four 8-lane floats: Q4_1 value i < 16 in the low nibble of qs[i], value
// i + 16 in its high nibble; Q8_0 one signed byte each.
__attribute__((target("avx2,fma,f16c"))) inline void unpack_q4(const uint8_t* qs, __m256 q[4]) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, mask), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
}
__attribute__((target("avx2,fma,f16c"))) inline void unpack_q8(const int8_t* qs, __m256 q[4]) {
  for (int c = 0; c < 4; ++c)
    q[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * c))));
}

// One row of blocks against T rows of x: per (t, block) v = sum(q x) over 8 lanes, acc += d v;
// Q4_1 adds m * (the block's sum of x, xsum[t * nb + b]) to a scalar beside it.
template <int T, bool Q4>
__attribute__((target("avx2,fma,f16c"))) void qrow_against(const float* x, int64_t K, const unsigned char* row,
                                                       const float* xsum, float* y, int64_t ldy) {
  using Block = std::conditional_t<Q4, quant::BlockQ4_1, quant::BlockQ8_0>;
  const int64_t nb = K / quant::kQK;
  const Block* blocks = reinterpret_cast<const Block*>(row);
  __m256 acc[T];
  float macc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    macc[t] = 0.f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256 q[4];
    if constexpr (Q4) unpack_q4(blocks[b].qs, q);
    else unpack_q8(blocks[b].qs, q);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(blocks[b].d));  // F16C: exact, as f16_to_f32
    [[maybe_unused]] float m = 0.f;
    if constexpr (Q4) m = _cvtsh_ss(blocks[b].m);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const float* xb = x + t * K + b * quant::kQK;
      __m256 v = _mm256_mul_ps(q[0], _mm256_loadu_ps(xb));
      v = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xb + 8), v);
      v = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xb + 16), v);
      v = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xb + 24), v);
      acc[t] = _mm256_fmadd_ps(d, v, acc[t]);
      if constexpr (Q4) macc[t] = std::fma(m, xsum[t * nb + b], macc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * ldy] = hsum(acc[t]) + macc[t];
}

template <bool Q4>
using QRowFn = void (*)(const float*, int64_t, const unsigned char*, const float*, float*, int64_t);
template <bool Q4>
constexpr QRowFn<Q4> kQRowFns[9] = {nullptr,
                                    qrow_against<1, Q4>,
                                    qrow_against<2, Q4>,
                                    qrow_against<3, Q4>,
                                    qrow_against<4, Q4>,
                                    qrow_against<5, Q4>,
                                    qrow_against<6, Q4>,
                                    qrow_against<7, Q4>,
                                    qrow_against<8, Q4>};

}  // namespace

bool linear_rows_available() {
  // CPUID leaf 1: ECX bit 12 FMA, bit 29 F16C; leaf 7: EBX bit 5 AVX2 (with the OS saving the
  // AVX state: OSXSAVE, ECX bit 27, and XCR0's SSE and AVX bits).
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool fma = c & (1u << 12), f16c = c & (1u << 29), osxsave = c & (1u << 27);
    if (!osxsave) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 6u) != 6u) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return fma && f16c && (b & (1u << 5));
  }();
  return ok;
}

void linear_rows(const float* x, int64_t T, int64_t K, const float* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  IS_CHECK(linear_rows_available(), "linear_rows needs AVX2, FMA and F16C");
  IS_CHECK(T >= 1 && T <= kLinearRowsMax, "linear_rows takes 1 to {} rows, not {}", kLinearRowsMax, T);
  // Weight rows one at a time, as one sequential stream the prefetchers follow (2-4 rows at a
  // time, for more independent chains, measured slower); x in chunks of 8 rows, so a row read
  // for the first chunk is in L1 for the next.
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t t0 = 0; t0 < T; t0 += 8)
      kRowFns[std::min<int64_t>(8, T - t0)](x + t0 * K, K, w + n * K, y + t0 * ldy + n, ldy);
}

bool linear_rows_quant_supported(DType t) {
  return linear_rows_available() && (t == DType::kQ4_1 || t == DType::kQ8_0);
}

void block_sums(const float* x, int64_t T, int64_t K, float* sums) {
  IS_CHECK(K % quant::kQK == 0, "block_sums: {} values a row is not whole blocks", K);
  for (int64_t i = 0; i < T * (K / quant::kQK); ++i) {
    float s = 0.f;
    for (int j = 0; j < quant::kQK; ++j) s += x[i * quant::kQK + j];
    sums[i] = s;
  }
}

void linear_rows_quant(const float* x, const float* xsum, int64_t T, int64_t K, const void* w, DType t, int64_t n0,
                       int64_t n1, float* y, int64_t ldy) {
  IS_CHECK(linear_rows_quant_supported(t), "linear_rows_quant: no kernel for {} on this CPU", dtype_name(t));
  IS_CHECK(T >= 1 && T <= kLinearRowsMax, "linear_rows_quant takes 1 to {} rows, not {}", kLinearRowsMax, T);
  IS_CHECK(K % quant::kQK == 0, "linear_rows_quant: {} values a row is not whole blocks", K);
  const bool q4 = t == DType::kQ4_1;
  IS_CHECK(!q4 || xsum != nullptr, "linear_rows_quant: Q4_1 needs the block sums of x");
  const int64_t nb = K / quant::kQK, row_bytes = nb * dtype_block(t).bytes;
  const auto* rows = static_cast<const unsigned char*>(w);
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t t0 = 0; t0 < T; t0 += 8) {
      const int c = static_cast<int>(std::min<int64_t>(8, T - t0));
      if (q4) kQRowFns<true>[c](x + t0 * K, K, rows + n * row_bytes, xsum + t0 * nb, y + t0 * ldy + n, ldy);
      else kQRowFns<false>[c](x + t0 * K, K, rows + n * row_bytes, nullptr, y + t0 * ldy + n, ldy);
    }
}

}  // namespace inferscale::cpu
