#include "memory/formats/json_text.h"

#include "util/check.h"

namespace inferscale {

nlohmann::json parse_json_text(std::string_view text, std::string_view where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    IS_THROW(kInvalidInput, "{}: not valid JSON: {}", where, e.what());
  }
}

}  // namespace inferscale
