#include "memory/retrieval/sentence_transformers.h"

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/json_file.h"
#include "util/check.h"

namespace inferscale {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

}  // namespace

std::optional<SentenceTransformersConfig> read_sentence_transformers_config(const std::string& model_dir) {
  const fs::path dir(model_dir);
  if (!fs::is_directory(dir) || !fs::exists(dir / "modules.json")) return std::nullopt;
  const json modules = load_json_file((dir / "modules.json").string());
  IS_REQUIRE(modules.is_array(), kInvalidInput, "{}: expected a list of modules", (dir / "modules.json").string());
  SentenceTransformersConfig c;
  bool pooled = false;
  for (const json& m : modules) {
    const std::string type = m.value("type", "");
    if (type.ends_with(".Normalize")) c.normalize = true;
    if (!type.ends_with(".Pooling")) continue;
    const json p = load_json_file((dir / m.value("path", "") / "config.json").string());
    std::vector<Pooling> modes;
    if (p.value("pooling_mode_mean_tokens", false)) modes.push_back(Pooling::kMean);
    if (p.value("pooling_mode_cls_token", false)) modes.push_back(Pooling::kCls);
    if (p.value("pooling_mode_lasttoken", false)) modes.push_back(Pooling::kLastToken);
    for (const char* other : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"})
      IS_REQUIRE(!p.value(other, false), kUnsupported, "{}: pooling mode '{}' is not supported (mean, cls, last token)",
                 model_dir, other);
    IS_REQUIRE(modes.size() == 1, kUnsupported, "{}: expected one pooling mode (mean, cls or last token), found {}",
               model_dir, modes.size());
    c.pooling = modes[0];
    pooled = true;
  }
  IS_REQUIRE(pooled, kUnsupported, "{}: modules.json has no Pooling module", model_dir);
  if (fs::exists(dir / "sentence_bert_config.json")) {
    const json s = load_json_file((dir / "sentence_bert_config.json").string());
    c.max_seq_length = static_cast<int32_t>(s.value("max_seq_length", 0));
  }
  return c;
}

}  // namespace inferscale
