#include "memory/formats/json_text.h"

#include "util/check.h"
#include "util/json_depth.h"

namespace inferscale {

nlohmann::json parse_json_text(std::string_view text, std::string_view where) {
  IS_REQUIRE(!json_deeper_than(text, kMaxImportJsonDepth), kInvalidInput,
             "{}: nests arrays and objects more than {} deep", where, kMaxImportJsonDepth);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    IS_THROW(kInvalidInput, "{}: not valid JSON: {}", where, e.what());
  }
}

}  // namespace inferscale
