// Reads a whole JSON file for the model loaders (config.json, safetensors index): kNotFound when it cannot be opened,
// kInvalidInput naming the file when it is not valid JSON.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace inferscale {

nlohmann::json load_json_file(const std::string& path);

}  // namespace inferscale
