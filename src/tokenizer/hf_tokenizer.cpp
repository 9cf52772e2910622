#include "tokenizer/hf_tokenizer.h"

#include <fstream>
#include <functional>

#include "tokenizer/hf_json.h"
#include "tokenizer/json_file.h"
#include "tokenizer/pre_tokenizers.h"
#include "util/check.h"

namespace inferscale {
using nlohmann::json;

std::shared_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& path) {
  return from_json(read_tokenizer_json(path), path);
}

std::shared_ptr<HfTokenizer> HfTokenizer::from_json(const json& j, const std::string& source) {
  BpeTokenizerSpec spec;
  spec.pre_name = "tokenizer.json";
  auto unsupported = [&](const std::string& what) { IS_THROW(kUnsupported, "{}: unsupported {}", source, what); };
  try {
    // --- model
    const json& m = j.at("model");
    if (m.contains("type") && m["type"] != "BPE") unsupported("model type '" + m["type"].get<std::string>() + "'");
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
      unsupported("BPE dropout");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
        unsupported(std::string("BPE ") + key);
    if (hf_flag(m, "byte_fallback")) unsupported("BPE byte_fallback (only byte-level BPE is supported)");

    const json& vocab = m.at("vocab");
    for (const auto& [token, id_json] : vocab.items()) {
      const int32_t id = hf_token_id(id_json, source, "vocab '" + token + "'");
      if (static_cast<size_t>(id) >= spec.tokens.size()) spec.tokens.resize(static_cast<size_t>(id) + 1);
      spec.tokens[static_cast<size_t>(id)] = token;
    }
    auto& merges = spec.merges;
    merges.reserve(m.at("merges").size());
    for (const json& merge : m.at("merges")) {
      if (merge.is_array()) {  // ["a", "b"]
        IS_REQUIRE(merge.size() == 2, kInvalidInput, "{}: a merge pair must have 2 parts: {}", source, merge.dump());
        merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      } else {  // "a b"
        const auto s = merge.get<std::string>();
        const size_t sp = s.find(' ');
        IS_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, kInvalidInput,
                   "{}: a merge must be two tokens separated by one space: '{}'", source, s);
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      }
    }
    spec.ignore_merges = hf_flag(m, "ignore_merges");

    // --- added tokens
    if (j.contains("added_tokens"))
      for (const json& t : j["added_tokens"]) spec.added.push_back(hf_added_token(t, hf_token_id(t.at("id"), source, "added_tokens")));

    // --- normalizer: none or NFC (possibly inside a Sequence)
    std::function<void(const json&)> normalizer = [&](const json& n) {
      if (n.is_null()) return;
      const std::string type = hf_type_of(n);
      if (type == "NFC") {
        spec.nfc = true;
      } else if (type == "Sequence") {
        for (const json& c : n.at("normalizers")) normalizer(c);
      } else {
        unsupported("normalizer type '" + type + "'");
      }
    };
    normalizer(j.value("normalizer", json()));

    // --- pre-tokenizer: Split(regex, Isolated) and ByteLevel steps, possibly inside a Sequence
    bool byte_level = false;
    std::function<void(const json&)> pre = [&](const json& p) {
      const std::string type = hf_type_of(p);
      if (type == "Sequence") {
        for (const json& c : p.at("pretokenizers")) pre(c);
      } else if (type == "Split") {
        if (p.value("behavior", "") != "Isolated")
          unsupported("Split behavior '" + p.value("behavior", "") + "' (only Isolated)");
        if (hf_flag(p, "invert")) unsupported("Split invert=true");
        const json& pat = p.at("pattern");
        std::string regex;
        if (pat.contains("Regex")) {
          regex = pat["Regex"].get<std::string>();
        } else {
          regex = "\\Q" + pat.at("String").get<std::string>() + "\\E";
        }
        spec.splits.push_back(std::move(regex));
      } else if (type == "ByteLevel") {
        byte_level = true;
        spec.prefix_space = hf_flag(p, "add_prefix_space");
        if (p.value("use_regex", true)) spec.splits.push_back(kGpt2SplitRegex);
      } else {
        unsupported("pre_tokenizer type '" + type + "'");
      }
    };
    pre(j.value("pre_tokenizer", json()));
    if (!byte_level) unsupported("pre_tokenizer without ByteLevel (only byte-level BPE is supported)");

    // --- decoder: ByteLevel only
    std::function<void(const json&)> decoder = [&](const json& d) {
      const std::string type = hf_type_of(d);
      if (type == "Sequence") {
        for (const json& c : d.at("decoders")) decoder(c);
      } else if (type != "ByteLevel") {
        unsupported("decoder type '" + (type.empty() ? std::string("null") : type) + "'");
      }
    };
    decoder(j.value("decoder", json()));

    // --- post-processor: ByteLevel (nothing for ids) and TemplateProcessing (single sequence)
    std::function<void(const json&)> post = [&](const json& p) {
      if (p.is_null()) return;
      const std::string type = hf_type_of(p);
      if (type == "Sequence") {
        for (const json& c : p.at("processors")) post(c);
      } else if (type == "TemplateProcessing") {
        hf_template_single(p, source, spec.prefix, spec.suffix);
      } else if (type != "ByteLevel") {
        unsupported("post_processor type '" + type + "'");
      }
    };
    post(j.value("post_processor", json()));
  } catch (const nlohmann::json::exception& e) {
    IS_THROW(kInvalidInput, "{}: malformed tokenizer.json: {}", source, e.what());
  }
  return make(std::move(spec), source);
}

std::shared_ptr<HfTokenizer> HfTokenizer::from_qwen2_files(const std::string& vocab_json,
                                                           const std::string& merges_txt, const json& config) {
  BpeTokenizerSpec spec;
  spec.pre_name = "qwen2";
  const json vocab = read_tokenizer_json(vocab_json);
  try {
    for (const auto& [token, id_json] : vocab.items()) {
      const int32_t id = hf_token_id(id_json, vocab_json, "vocab '" + token + "'");
      if (static_cast<size_t>(id) >= spec.tokens.size()) spec.tokens.resize(static_cast<size_t>(id) + 1);
      spec.tokens[static_cast<size_t>(id)] = token;
    }
  } catch (const json::exception& e) {
    IS_THROW(kInvalidInput, "{}: malformed vocabulary: {}", vocab_json, e.what());
  }
  std::ifstream in(merges_txt);
  IS_REQUIRE(in.good(), kNotFound, "cannot open {}", merges_txt);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    IS_REQUIRE(sp != std::string::npos, kInvalidInput, "{}:{}: a merge must be two tokens separated by a space",
               merges_txt, n);
    spec.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  if (config.contains("added_tokens_decoder"))
    for (const auto& [id, t] : config["added_tokens_decoder"].items())
      spec.added.push_back(hf_added_token(t, static_cast<int32_t>(std::stoi(id))));
  spec.nfc = true;
  spec.splits.push_back(kQwen2SplitRegex);
  return make(std::move(spec), merges_txt);
}

std::shared_ptr<HfTokenizer> HfTokenizer::make(BpeTokenizerSpec spec, const std::string& source) {
  try {
    return std::shared_ptr<HfTokenizer>(new HfTokenizer(std::move(spec)));
  } catch (const Error& e) {
    throw Error(e.kind(), source + ": " + e.what());
  }
}

}  // namespace inferscale
