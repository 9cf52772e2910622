#include "cli/sampling_options.h"

namespace inferscale::cli {

void add_sampling_options(CLI::App& cmd, SamplingArgs& a) {
  cmd.add_option("--temperature,-t", a.temperature, "0 = greedy (default: the model's default sampling, see `info`)")
      ->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--top-k", a.top_k, "0 = off (default: the model's)")->check(CLI::NonNegativeNumber);
  cmd.add_option("--top-p", a.top_p, "nucleus mass, 1 = off (default: the model's)")->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--min-p", a.min_p, "drop ids below min_p x the top id's probability, 0 = off (default: the model's)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--seed", a.seed, "sampling seed (-1 = random)")->capture_default_str();
}

SamplingParams sampling_params(const SamplingArgs& a, const SamplingDefaults& d) {
  SamplingParams sp;
  sp.temperature = a.temperature.value_or(d.temperature);
  sp.top_k = a.top_k.value_or(d.top_k);
  sp.top_p = a.top_p.value_or(d.top_p);
  sp.min_p = a.min_p.value_or(d.min_p);
  if (a.seed >= 0) sp.seed = static_cast<uint64_t>(a.seed);
  return sp;
}

}  // namespace inferscale::cli
