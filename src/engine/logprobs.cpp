#include "engine/logprobs.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "util/check.h"

namespace inferscale {
namespace {

// exp(x) for x <= 0 in double, branch-free so the block loop vectorizes (std::exp does not):
// x = k ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), exp(r) by its Taylor series to r^13
// (truncation below 2e-16 relative), 2^k from the exponent bits. Inputs below -708 give exp(-708)
// (~3e-308), which cannot change a sum that holds exp(0) = 1.
inline double exp_nonpositive(double x) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln2's high bits: k * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShifter = 6755399441055744.0;        // 1.5 * 2^52: adding it rounds to an integer
  x = x < -708.0 ? -708.0 : x;
  const double t = x * kLog2e + kShifter;                // the low mantissa bits of t hold k
  const double k = t - kShifter;
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;                         // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k, k in [-1022, 0]: (k + 1023) into the exponent field (the shifter's bits shift out).
  const uint64_t bits = (std::bit_cast<uint64_t>(t) + 1023u) << 52;
  return p * std::bit_cast<double>(bits);
}

constexpr int64_t kBlock = 1024;  // floats per block: a block stays in L1 between its loops

}  // namespace

// Built for AVX-512, AVX2 and the baseline; the loader picks the best the CPU has (the exp loop is
// compute bound: 8 doubles per instruction instead of 2). The pick is an ifunc resolver that the
// loader runs before ThreadSanitizer's runtime is up (it crashes there), so a TSan build
// (INFERSCALE_SANITIZE=thread) takes the baseline alone.
#if defined(__SANITIZE_THREAD__)
#define IS_LOGPROB_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IS_LOGPROB_CLONES
#endif
#endif
#ifndef IS_LOGPROB_CLONES
#define IS_LOGPROB_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
IS_LOGPROB_CLONES
LogprobEntry compute_logprobs(std::span<const float> logits, int32_t token, int32_t top_n, bool distribution) {
  const int64_t V = static_cast<int64_t>(logits.size());
  IS_CHECK(V > 0 && token >= 0 && token < V, "token {} outside a row of {} logits", token, V);
  IS_CHECK(top_n >= 0 && top_n <= kMaxLogprobs, "top_n {} outside [0, {}]", top_n, kMaxLogprobs);
  const int32_t n_top = static_cast<int32_t>(std::min<int64_t>(top_n, V));
  const float* x = logits.data();
  const float target = x[token];

  double m = -std::numeric_limits<double>::infinity();  // running maximum
  double sum = 0;                                         // sum of exp(x - m) so far
  int64_t greater = 0;                                    // ids with a larger logit than the target
  // The best n_top so far, best first; (logit, id), ties kept in id order.
  std::array<std::pair<float, int32_t>, kMaxLogprobs> top{};
  int32_t filled = 0;

  for (int64_t b = 0; b < V; b += kBlock) {
    const int64_t n = std::min(kBlock, V - b);
    const float* xb = x + b;
    float bm = xb[0];
#pragma omp simd reduction(max : bm)
    for (int64_t j = 1; j < n; ++j) bm = std::max(bm, xb[j]);
    if (bm > m) {
      sum *= std::exp(m - static_cast<double>(bm));  // 0 on the first block (m = -inf)
      m = bm;
    }
    double s = 0;
    int64_t g = 0;
#pragma omp simd reduction(+ : s, g)
    for (int64_t j = 0; j < n; ++j) {
      s += exp_nonpositive(static_cast<double>(xb[j]) - m);
      g += xb[j] > target ? 1 : 0;
    }
    sum += s;
    greater += g;
    // Top-N: a block whose maximum cannot beat the current last entry is skipped whole.
    if (n_top > 0 && (filled < n_top || bm > top[static_cast<size_t>(filled - 1)].first)) {
      for (int64_t i = 0; i < n; ++i) {
        const float v = xb[i];
        if (filled == n_top && !(v > top[static_cast<size_t>(filled - 1)].first)) continue;
        // Insert after every entry >= v (earlier ids win ties), dropping the last when full.
        int32_t at = filled < n_top ? filled : n_top - 1;
        while (at > 0 && top[static_cast<size_t>(at - 1)].first < v) {
          top[static_cast<size_t>(at)] = top[static_cast<size_t>(at - 1)];
          --at;
        }
        top[static_cast<size_t>(at)] = {v, static_cast<int32_t>(b + i)};
        if (filled < n_top) ++filled;
      }
    }
  }

  const double lse = m + std::log(sum);
  LogprobEntry e;
  e.token = token;
  e.logprob = static_cast<double>(target) - lse;
  e.rank = static_cast<int32_t>(greater + 1);
  e.top.reserve(static_cast<size_t>(filled));
  for (int32_t i = 0; i < filled; ++i)
    e.top.push_back({top[static_cast<size_t>(i)].second, static_cast<double>(top[static_cast<size_t>(i)].first) - lse});
  if (distribution) {
    e.distribution.resize(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) e.distribution[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
  }
  return e;
}

std::vector<double> log_softmax_row(std::span<const float> logits) {
  IS_CHECK(!logits.empty(), "log_softmax of an empty row");
  return compute_logprobs(logits, 0, 0, /*distribution=*/true).distribution;
}

}  // namespace inferscale
