// The sampling options of the commands that generate (generate, chat): each one the user leaves
// out takes the model's default sampling (Model::sampling, model/generation_config.h), as a
// server request's absent fields do.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>

#include "engine/request.h"
#include "model/generation_config.h"

namespace inferscale::cli {

struct SamplingArgs {
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  int64_t seed = -1;  // -1: random
};

void add_sampling_options(CLI::App& cmd, SamplingArgs& args);

// The fields given, the model's defaults for the rest, and the seed.
SamplingParams sampling_params(const SamplingArgs& args, const SamplingDefaults& defaults);

}  // namespace inferscale::cli
