#include "model/generation_config.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/json_file.h"
#include "tensor/gguf_file.h"
#include "util/check.h"

namespace inferscale {
namespace {

using nlohmann::json;

// One field's value from a JSON number (or, for top_k, an integer).
float json_float(const json& v, const std::string& where, const char* field) {
  // A double past float's range would convert with undefined behaviour.
  IS_REQUIRE(v.is_number() && std::fabs(v.get<double>()) <= std::numeric_limits<float>::max(), kInvalidInput,
             "{}: '{}' must be a number in float's range, got {}", where, field, v.dump());
  return v.get<float>();
}

void set_field(SamplingDefaults& d, std::string_view field, double v, const std::string& where) {
  IS_REQUIRE(std::isfinite(v), kInvalidInput, "{}: '{}' must be a finite number", where, field);
  if (field == "temperature") {
    d.temperature = static_cast<float>(v);
  } else if (field == "top_k") {
    IS_REQUIRE(v == std::floor(v) && std::abs(v) < 1e9, kInvalidInput, "{}: 'top_k' must be an integer", where);
    d.top_k = v < 0 ? 0 : static_cast<int32_t>(v);  // -1 (HF, vLLM): off
  } else if (field == "top_p") {
    d.top_p = static_cast<float>(v);
  } else if (field == "min_p") {
    d.min_p = static_cast<float>(v);
  } else {
    IS_THROW(kInvalidInput, "{}: unknown sampling field '{}' (temperature, top_k, top_p, min_p)", where, field);
  }
}

}  // namespace

std::string SamplingDefaults::describe() const {
  return fmt::format("temperature {:g}, top_k {}, top_p {:g}, min_p {:g} ({})", temperature, top_k, top_p, min_p, source);
}

SamplingDefaults llama_cpp_sampling_defaults() {
  return SamplingDefaults{0.8f, 40, 0.95f, 0.05f, "llama.cpp's server defaults"};
}

SamplingDefaults read_generation_config(const std::filesystem::path& file, SamplingDefaults base) {
  const json j = load_json_file(file.string());
  const std::string where = file.string();
  IS_REQUIRE(j.is_object(), kInvalidInput, "{}: expected a JSON object", where);
  SamplingDefaults d = base;
  bool any = false;
  for (const char* field : {"temperature", "top_k", "top_p", "min_p"}) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) continue;
    set_field(d, field, json_float(*it, where, field), where);
    any = true;
  }
  if (auto it = j.find("do_sample"); it != j.end() && it->is_boolean() && !it->get<bool>()) {
    d.temperature = 0.0f;
    any = true;
  }
  if (any) d.source = where;
  check_sampling_defaults(d, where);
  return d;
}

SamplingDefaults gguf_sampling_defaults(const GgufFile& g, SamplingDefaults base) {
  SamplingDefaults d = base;
  bool any = false;
  const std::pair<const char*, const char*> keys[] = {{"general.sampling.temp", "temperature"},
                                                      {"general.sampling.top_k", "top_k"},
                                                      {"general.sampling.top_p", "top_p"},
                                                      {"general.sampling.min_p", "min_p"}};
  for (const auto& [key, field] : keys) {
    if (!g.has(key)) continue;
    set_field(d, field, g.get_float(key), "GGUF metadata");
    any = true;
  }
  if (any) d.source = "the GGUF file's general.sampling keys";
  check_sampling_defaults(d, "GGUF metadata");
  return d;
}

SamplingDefaults parse_sampling_overrides(std::string_view spec, SamplingDefaults base) {
  SamplingDefaults d = base;
  const std::string where = fmt::format("--default-sampling '{}'", spec);
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string_view item = spec.substr(at, comma - at);
    at = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    IS_REQUIRE(eq != std::string_view::npos, kInvalidInput, "{}: '{}' is not NAME=VALUE", where, item);
    const std::string_view name = item.substr(0, eq), text = item.substr(eq + 1);
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    IS_REQUIRE(ec == std::errc() && end == text.data() + text.size(), kInvalidInput, "{}: '{}' is not a number", where,
               text);
    set_field(d, name, v, where);
  }
  d.source = base.source + ", overridden by --default-sampling";
  check_sampling_defaults(d, where);
  return d;
}

void check_sampling_defaults(const SamplingDefaults& d, std::string_view where) {
  IS_REQUIRE(d.temperature >= 0.0f && d.temperature <= 2.0f, kInvalidInput, "{}: temperature {} outside [0, 2]", where,
             d.temperature);
  IS_REQUIRE(d.top_k >= 0, kInvalidInput, "{}: top_k {} is negative", where, d.top_k);
  IS_REQUIRE(d.top_p > 0.0f && d.top_p <= 1.0f, kInvalidInput, "{}: top_p {} outside (0, 1]", where, d.top_p);
  IS_REQUIRE(d.min_p >= 0.0f && d.min_p <= 1.0f, kInvalidInput, "{}: min_p {} outside [0, 1]", where, d.min_p);
}

}  // namespace inferscale
