// A served model's default sampling: what a request gets for each of temperature, top_k, top_p and
// min_p that it does not set itself (the request's own fields always win). Resolved in this order,
// each step overriding the fields it names:
//
//   llama.cpp's server defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05)
//     <- the model's own: an HF directory's generation_config.json (as vLLM reads it) or a GGUF's
//        general.sampling.* keys (as llama.cpp writes them)
//     <- `serve --generation-config FILE|DIR` (a generation_config.json)
//     <- `serve --default-sampling temperature=0.2,top_p=0.9`
//
// "openai" for --generation-config gives OpenAI's API defaults instead of the model's (temperature
// 1, nothing else): vLLM's `--generation-config vllm`.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace inferscale {

class GgufFile;

struct SamplingDefaults {
  float temperature = 1.0f;  // OpenAI's defaults; 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  std::string source = "OpenAI's defaults";  // where the values came from, for logs and `info`

  // "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama.cpp's server defaults)"
  std::string describe() const;
};

// llama.cpp's server defaults: the base for a model that says nothing about its sampling.
SamplingDefaults llama_cpp_sampling_defaults();

// The fields generation_config.json sets over `base` (temperature, top_k, top_p, min_p; others
// ignored). `do_sample: false` makes the defaults greedy. kInvalidInput naming the file and field
// for a value of the wrong type or range; kNotFound when the file cannot be read.
SamplingDefaults read_generation_config(const std::filesystem::path& file, SamplingDefaults base);

// The general.sampling.{temp,top_k,top_p,min_p} keys of a GGUF file over `base`.
SamplingDefaults gguf_sampling_defaults(const GgufFile& g, SamplingDefaults base);

// "temperature=0.2,top_p=0.9" over `base`; kInvalidInput naming the bad item.
SamplingDefaults parse_sampling_overrides(std::string_view spec, SamplingDefaults base);

// kInvalidInput naming the field unless temperature in [0, 2], top_k >= 0, top_p in (0, 1],
// min_p in [0, 1] (the API's ranges).
void check_sampling_defaults(const SamplingDefaults& d, std::string_view where);

}  // namespace inferscale
