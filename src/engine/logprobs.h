// Log-probabilities of one row of logits: the one computation behind OpenAI's `logprobs` /
// `top_logprobs` (sampled tokens), legacy `echo` and vLLM's `prompt_logprobs` (prompt tokens).
//
// Values are log_softmax(logits)[id] over the row given (the engine passes the raw model logits over
// the sampleable vocabulary, before temperature, top-k and top-p, as vLLM does by default), in
// double precision:
//
//   logprob(id) = logits[id] - (max + log(sum_j exp(logits[j] - max)))
//
// One pass over the row (in cache-sized blocks): block maximum, running sum of exp rescaled when
// the maximum grows, the count of ids above the target (its rank) and a partial top-N.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace inferscale {

// The most `top_logprobs` / `prompt_logprobs` a request may ask for (vLLM's default max_logprobs).
inline constexpr int32_t kMaxLogprobs = 20;

struct TokenLogprob {
  int32_t id = 0;
  double logprob = 0;
};

// One scored position.
struct LogprobEntry {
  int32_t token = 0;              // the token scored: the sampled one, or the prompt's next token
  double logprob = 0;
  int32_t rank = 0;               // 1 + the number of ids with a strictly larger logit
  std::vector<TokenLogprob> top;  // the top_n most likely ids, best first; equal logits: lower id first
  std::vector<double> distribution;  // the whole row's log-softmax, when asked (SamplingParams::prompt_distributions)
};

// logits: [V] one row. `token` in [0, V); `top_n` in [0, kMaxLogprobs] (clamped to V);
// `distribution`: also the whole row's log-softmax (LogprobEntry::distribution), from the same
// log-sum-exp. Throws kInternal on out-of-range arguments (the engine validates requests before
// they get here).
LogprobEntry compute_logprobs(std::span<const float> logits, int32_t token, int32_t top_n, bool distribution = false);

// log_softmax(logits) of a whole row, in double: x[i] - log(sum_j exp(x[j])) (compute_logprobs').
std::vector<double> log_softmax_row(std::span<const float> logits);

}  // namespace inferscale
