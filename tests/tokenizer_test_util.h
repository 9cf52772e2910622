// Helpers shared by the tokenizer tests: where the shared tokenizer files and the goldens live,
// and loaders for the golden JSON files (made by scripts/make_tokenizer_goldens.py).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace inferscale::test {

inline std::string shared_data(const std::string& rel) { return std::string(INFERSCALE_SHARED_DATA) + "/" + rel; }
inline std::string fixture(const std::string& name) {
  return std::string(INFERSCALE_FIXTURES) + "/tokenizers/" + name;
}

inline nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(fixture(name));
  EXPECT_TRUE(in.good()) << "missing fixture " << fixture(name);
  return nlohmann::json::parse(in);
}

// Skips the current test when a shared data file is absent (CI without shared/ data).
#define IS_SKIP_WITHOUT(path)                                                         \
  do {                                                                                \
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data absent: " << (path); \
  } while (0)

// The stories260K vocabulary from the arrays the golden script extracted from the GGUF.
inline std::shared_ptr<GgufSpmTokenizer> stories_from_fixture() {
  const nlohmann::json j = load_fixture("stories260K_vocab.json");
  GgufVocabArrays v;
  v.tokens = j.at("tokens").get<std::vector<std::string>>();
  v.scores = j.at("scores").get<std::vector<float>>();
  v.types = j.at("token_type").get<std::vector<int32_t>>();
  v.bos_id = j.at("bos_token_id").get<int32_t>();
  v.eos_id = j.at("eos_token_id").get<int32_t>();
  v.unk_id = j.at("unknown_token_id").get<int32_t>();
  if (j.at("add_bos_token").is_boolean()) v.add_bos = j["add_bos_token"].get<bool>();
  if (j.at("add_space_prefix").is_boolean()) v.add_space_prefix = j["add_space_prefix"].get<bool>();
  return std::make_shared<GgufSpmTokenizer>(std::move(v));
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace inferscale::test
