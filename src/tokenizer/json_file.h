// Reads a JSON file for the tokenizer loaders; errors name the file (kNotFound when it cannot be
// opened, kInvalidInput with the parser's message when it is malformed).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace inferscale {

nlohmann::json read_json_file(const std::string& path);

}  // namespace inferscale
