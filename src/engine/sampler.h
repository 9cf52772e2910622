// Token sampling from one row of logits: greedy, temperature, top-k, top-p, seeded per request.
#pragma once
#include <cstdint>
#include <random>
#include <span>

#include "engine/request.h"

namespace inferscale {

// logits: [vocab]. Greedy (temperature 0) takes the lowest index among equal maxima.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace inferscale
