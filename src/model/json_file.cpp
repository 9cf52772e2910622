#include "model/json_file.h"

#include <fstream>

#include "util/check.h"

namespace inferscale {

nlohmann::json load_json_file(const std::string& path) {
  std::ifstream in(path);
  IS_REQUIRE(in.good(), kNotFound, "cannot open {}", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    IS_THROW(kInvalidInput, "{}: not valid JSON: {}", path, e.what());
  }
}

}  // namespace inferscale
