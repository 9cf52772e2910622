// The reference the logprobs tests compare against: a plain two-pass log-softmax in long double
// (summed in order), independent of compute_logprobs' blocked one-pass double arithmetic.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace inferscale::testing {

// log_softmax(row[0..V)).
inline std::vector<double> reference_log_softmax(const float* row, int64_t V) {
  long double m = -INFINITY;
  for (int64_t j = 0; j < V; ++j) m = std::max<long double>(m, row[j]);
  long double s = 0;
  for (int64_t j = 0; j < V; ++j) s += std::exp(static_cast<long double>(row[j]) - m);
  const long double lse = m + std::log(s);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) out[static_cast<size_t>(j)] = static_cast<double>(static_cast<long double>(row[j]) - lse);
  return out;
}

// Ids with a strictly larger logit than `id`, plus one.
inline int32_t reference_rank(const float* row, int64_t V, int32_t id) {
  int32_t greater = 0;
  for (int64_t j = 0; j < V; ++j) greater += row[j] > row[id];
  return greater + 1;
}

}  // namespace inferscale::testing
