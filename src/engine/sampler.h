// Token sampling from one row of logits: greedy, temperature, top-k, top-p, min-p, seeded per request.
// The rule itself is model/sampling.h (sample_row), which the backends also run on their own
// logits (ForwardBatch::Output::kSample); this layer turns a request's parameters and its rng into
// a RowSampling. Each non-greedy sampled token takes exactly one draw from the request's rng,
// whichever path samples it, so a seed gives the same tokens with or without logprobs.
#pragma once
#include <cstdint>
#include <random>
#include <span>

#include "model/sampling.h"
#include "engine/request.h"

namespace inferscale {

// Greedy: temperature 0 or top_k 1. The engine then asks the backend for the argmax only.
inline bool is_greedy(const SamplingParams& p) { return p.temperature <= 0.0f || p.top_k == 1; }

// A uniform draw in [0, 1) with 24 random bits (exact in float).
inline float draw_uniform(std::mt19937_64& rng) { return static_cast<float>(rng() >> 40) * 0x1p-24f; }

// The row's sampling; draws u from rng unless the request is greedy.
RowSampling row_sampling(const SamplingParams& p, std::mt19937_64& rng);

// logits: [vocab]. Greedy (is_greedy) takes the lowest index among equal maxima.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace inferscale
