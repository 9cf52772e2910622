// The sampling rule both backends run: one row of logits and one uniform draw u -> one token id.
// The engine's logits path (logprobs requests), the CPU backend's ForwardBatch::Output::kSample and
// cuda::sample_rows (its device twin) all implement exactly this, so a seeded request draws the same
// tokens whether its logits leave the device or not.
//
// Over the ids [0, n) of a row, with m = the largest logit:
//   greedy (temperature <= 0 or top_k == 1): the largest logit, the lowest id on ties; u unused.
//   otherwise:
//     1. top_k in (0, n): keep the ids whose logit >= the top_k-th largest logit (ties there all stay);
//        else keep every id; and min-p: keep only the ids with logit - m >= min_gap (float
//        arithmetic), min_gap = temperature * ln(min_p) (min_p_gap), i.e. w >= min_p below;
//     2. weights w = exp((logit - m) / temperature) over the kept ids;
//     3. top_p < 1: keep the ids whose logit >= t, t the largest logit value whose kept ids with
//        logit >= t hold at least top_p of the weight of step 1 (the smallest nucleus; >= 1 id);
//     4. r = u * W (W = the weight left); the first id, in id order, whose cumulative weight
//        exceeds r (the last kept id when rounding leaves none).
// Sweeping in id order instead of by probability draws from the same distribution and needs no
// sort, which is what makes it cheap on the device.
#pragma once
#include <cmath>
#include <cstdint>

namespace inferscale {

struct RowSampling {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: no limit
  float top_p = 1.0f;        // (0, 1]
  float u = 0.0f;            // [0, 1), the row's uniform draw
  // min-p as a distance below the largest logit (-inf: off). Computed once on the host
  // (min_p_gap), so the host and the device compare the same float.
  float min_gap = -INFINITY;
};

// The min_gap of min-p sampling (vLLM's and llama.cpp's min_p, over the tempered distribution):
// an id stays when its probability is at least min_p times the largest one. min_p <= 0: -inf (off).
float min_p_gap(float temperature, float min_p);

inline bool row_is_greedy(const RowSampling& s) { return s.temperature <= 0.0f || s.top_k == 1; }

// Throws kInternal when a field is outside its range (temperature not finite, top_p outside (0, 1],
// u outside [0, 1), min_gap NaN or positive).
void check_row_sampling(const RowSampling& s);

// logits: [n] (n >= 1). The CPU twin of cuda::sample_rows.
int32_t sample_row(const float* logits, int64_t n, const RowSampling& s);

}  // namespace inferscale
