// Requests for engine tests: greedy sampling that runs to max_tokens, and prompts of byte tokens.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "engine/request.h"

namespace inferscale::test {

// Greedy, ignoring EOS: exactly `max_tokens` tokens unless a stop ends them.
inline SamplingParams greedy(int32_t max_tokens) {
  SamplingParams s;
  s.temperature = 0;
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  return s;
}

// `n` byte tokens (0..255), the same for the same seed.
inline std::vector<int32_t> byte_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % 256);
  return p;
}

}  // namespace inferscale::test
