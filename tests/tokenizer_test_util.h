// Helpers shared by the tokenizer tests: where the shared tokenizer files and the goldens live,
// and loaders for the golden JSON files (made by scripts/make_tokenizer_goldens.py).
#pragma once
#include <gtest/gtest.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
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

// A fetched model file (scripts/fetch_models.sh puts them in the repository's models/ folder).
inline std::string repo_model(const std::string& name) {
  return std::string(INFERSCALE_FIXTURES) + "/../../models/" + name;
}

// The 256 single-byte tokens in GPT-2's byte-level spelling, ids 0..255 in byte order.
inline std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(byte_level_char(static_cast<unsigned char>(b)));
  return t;
}

// Collects what spdlog's default logger prints while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  // The lines printed so far that contain `part` (formatted, level included).
  size_t count(const std::string& part) const {
    size_t n = 0;
    for (const std::string& line : sink_->last_formatted())
      if (line.find(part) != std::string::npos) ++n;
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

}  // namespace inferscale::test
