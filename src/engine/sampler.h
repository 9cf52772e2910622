// Token sampling from one row of logits: greedy, temperature, top-k, top-p, seeded per request.
#pragma once
#include <cstdint>
#include <random>
#include <span>

#include "engine/request.h"

namespace inferscale {

// Greedy: temperature 0 or top_k 1. The engine then asks the backend for the argmax only.
inline bool is_greedy(const SamplingParams& p) { return p.temperature <= 0.0f || p.top_k == 1; }

// logits: [vocab]. Greedy (is_greedy) takes the lowest index among equal maxima.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace inferscale
