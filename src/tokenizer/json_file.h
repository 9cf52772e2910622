// Reads a JSON file for the tokenizer loaders (tokenizer.json, tokenizer_config.json, vocab.json).
// Errors name the file: kNotFound when it cannot be opened, kInvalidInput with the parser's message
// when it is malformed.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace inferscale {

nlohmann::json read_tokenizer_json(const std::string& path);

}  // namespace inferscale
