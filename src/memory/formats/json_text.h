// Parsing JSON text from outside (files, request bodies) into nlohmann::json, with errors that
// name where the text came from.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

namespace inferscale {

// kInvalidInput "<where>: not valid JSON: <parser message>" on malformed text.
nlohmann::json parse_json_text(std::string_view text, std::string_view where);

}  // namespace inferscale
