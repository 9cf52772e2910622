#include "tokenizer/json_file.h"

#include <fstream>
#include <sstream>

#include "util/check.h"

namespace inferscale {

nlohmann::json read_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  IS_REQUIRE(in.good(), kNotFound, "cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    IS_THROW(kInvalidInput, "{} is not valid JSON: {}", path, e.what());
  }
}

}  // namespace inferscale
