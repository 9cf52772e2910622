// A model's config.json to ModelConfig (architecture, shapes, RoPE scaling, EOS ids, ...).
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "model/config.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The JSON text itself is nlohmann's to parse (a syntax error is its own, checked by the caller
  // as kInvalidInput in ModelConfig::from_hf_file); the config is ours.
  const nlohmann::json j = nlohmann::json::parse(fuzz::text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  fuzz::expect_clear_error([&] { ModelConfig::from_hf_json(j); });
  const std::string& path = fuzz::as_file(data, size, ".json");
  fuzz::expect_clear_error([&] { ModelConfig::from_hf_file(path); });
  return 0;
}
