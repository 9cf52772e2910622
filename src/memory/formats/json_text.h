// Parsing JSON text from outside (files, request bodies) into nlohmann::json, with errors that
// name where the text came from.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

namespace inferscale {

// Imported JSON (LoCoMo files, fact records) nests arrays and objects at most this deep.
inline constexpr size_t kMaxImportJsonDepth = 64;
// kInvalidInput "<where>: not valid JSON: <parser message>" on malformed text, or when it nests
// deeper than kMaxImportJsonDepth.
nlohmann::json parse_json_text(std::string_view text, std::string_view where);

}  // namespace inferscale
