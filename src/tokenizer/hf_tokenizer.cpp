#include "tokenizer/hf_tokenizer.h"

#include <fstream>
#include <functional>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_file.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {
namespace {

using nlohmann::json;

// GPT-2's split, used by ByteLevel(use_regex=true).
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2's split (single digits), used with the slow files.
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j) { return j.is_object() && j.contains("type") ? j["type"].get<std::string>() : ""; }

bool flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

// The raw bytes of a byte-level token string; a string outside the alphabet stands for itself.
std::string token_to_bytes(const std::string& token) {
  auto bytes = byte_level_decode(token);
  return bytes ? std::move(*bytes) : token;
}

AddedToken parse_added(const json& t, int32_t id) {
  AddedToken a;
  a.id = id;
  a.content = t.at("content").get<std::string>();
  a.special = flag(t, "special");
  a.lstrip = flag(t, "lstrip");
  a.rstrip = flag(t, "rstrip");
  a.single_word = flag(t, "single_word");
  return a;
}

}  // namespace

std::shared_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& path) {
  return from_json(read_tokenizer_json(path), path);
}

std::shared_ptr<HfTokenizer> HfTokenizer::from_json(const json& j, const std::string& source) {
  std::shared_ptr<HfTokenizer> tok(new HfTokenizer());
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
    if (flag(m, "byte_fallback")) unsupported("BPE byte_fallback (only byte-level BPE is supported)");

    const json& vocab = m.at("vocab");
    std::vector<std::string> bytes;
    for (const auto& [token, id_json] : vocab.items()) {
      const auto id = id_json.get<int64_t>();
      IS_REQUIRE(id >= 0 && id < (1 << 24), kInvalidInput, "{}: vocab id {} of '{}' is out of range", source, id, token);
      if (static_cast<size_t>(id) >= bytes.size()) {
        bytes.resize(static_cast<size_t>(id) + 1);
        tok->token_text_.resize(static_cast<size_t>(id) + 1);
      }
      bytes[static_cast<size_t>(id)] = token_to_bytes(token);
      tok->token_text_[static_cast<size_t>(id)] = token;
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(m.at("merges").size());
    for (const json& merge : m.at("merges")) {
      if (merge.is_array()) {  // ["a", "b"]
        IS_REQUIRE(merge.size() == 2, kInvalidInput, "{}: a merge pair must have 2 parts: {}", source, merge.dump());
        merges.emplace_back(token_to_bytes(merge[0]), token_to_bytes(merge[1]));
      } else {  // "a b"
        const auto s = merge.get<std::string>();
        const size_t sp = s.find(' ');
        IS_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, kInvalidInput,
                   "{}: a merge must be two tokens separated by one space: '{}'", source, s);
        merges.emplace_back(token_to_bytes(s.substr(0, sp)), token_to_bytes(s.substr(sp + 1)));
      }
    }
    tok->model_ = std::make_unique<BpeModel>(std::move(bytes), merges, flag(m, "ignore_merges"));

    // --- added tokens
    if (j.contains("added_tokens"))
      for (const json& t : j["added_tokens"]) tok->added_.add(parse_added(t, t.at("id").get<int32_t>()));

    // --- normalizer: none or NFC (possibly inside a Sequence)
    std::function<void(const json&)> normalizer = [&](const json& n) {
      if (n.is_null()) return;
      const std::string type = type_of(n);
      if (type == "NFC") {
        tok->nfc_ = true;
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
      const std::string type = type_of(p);
      if (type == "Sequence") {
        for (const json& c : p.at("pretokenizers")) pre(c);
      } else if (type == "Split") {
        if (p.value("behavior", "") != "Isolated")
          unsupported("Split behavior '" + p.value("behavior", "") + "' (only Isolated)");
        if (flag(p, "invert")) unsupported("Split invert=true");
        const json& pat = p.at("pattern");
        std::string regex;
        if (pat.contains("Regex")) {
          regex = pat["Regex"].get<std::string>();
        } else {
          regex = "\\Q" + pat.at("String").get<std::string>() + "\\E";
        }
        tok->splits_.push_back(std::make_unique<RegexSplitter>(regex));
      } else if (type == "ByteLevel") {
        byte_level = true;
        tok->prefix_space_ = flag(p, "add_prefix_space");
        if (p.value("use_regex", true)) tok->splits_.push_back(std::make_unique<RegexSplitter>(kGpt2Regex));
      } else {
        unsupported("pre_tokenizer type '" + type + "'");
      }
    };
    pre(j.value("pre_tokenizer", json()));
    if (!byte_level) unsupported("pre_tokenizer without ByteLevel (only byte-level BPE is supported)");

    // --- decoder: ByteLevel only
    std::function<void(const json&)> decoder = [&](const json& d) {
      const std::string type = type_of(d);
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
      const std::string type = type_of(p);
      if (type == "Sequence") {
        for (const json& c : p.at("processors")) post(c);
      } else if (type == "TemplateProcessing") {
        bool seen_a = false;
        for (const json& item : p.at("single")) {
          if (item.contains("Sequence")) {
            if (item["Sequence"].at("id") != "A") unsupported("TemplateProcessing single with a second sequence");
            seen_a = true;
          } else {
            const auto name = item.at("SpecialToken").at("id").get<std::string>();
            const json& ids = p.at("special_tokens").at(name).at("ids");
            auto& dst = seen_a ? tok->suffix_ : tok->prefix_;
            for (const json& id : ids) dst.push_back(id.get<int32_t>());
          }
        }
      } else if (type != "ByteLevel") {
        unsupported("post_processor type '" + type + "'");
      }
    };
    post(j.value("post_processor", json()));
  } catch (const nlohmann::json::exception& e) {
    IS_THROW(kInvalidInput, "{}: malformed tokenizer.json: {}", source, e.what());
  }
  tok->finish();
  return tok;
}

std::shared_ptr<HfTokenizer> HfTokenizer::from_qwen2_files(const std::string& vocab_json,
                                                           const std::string& merges_txt, const json& config) {
  std::shared_ptr<HfTokenizer> tok(new HfTokenizer());
  const json vocab = read_tokenizer_json(vocab_json);
  std::vector<std::string> bytes;
  try {
    for (const auto& [token, id_json] : vocab.items()) {
      const auto id = static_cast<size_t>(id_json.get<int32_t>());
      if (id >= bytes.size()) {
        bytes.resize(id + 1);
        tok->token_text_.resize(id + 1);
      }
      bytes[id] = token_to_bytes(token);
      tok->token_text_[id] = token;
    }
  } catch (const json::exception& e) {
    IS_THROW(kInvalidInput, "{}: malformed vocabulary: {}", vocab_json, e.what());
  }
  std::ifstream in(merges_txt);
  IS_REQUIRE(in.good(), kNotFound, "cannot open {}", merges_txt);
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    IS_REQUIRE(sp != std::string::npos, kInvalidInput, "{}:{}: a merge must be two tokens separated by a space",
               merges_txt, n);
    merges.emplace_back(token_to_bytes(line.substr(0, sp)), token_to_bytes(line.substr(sp + 1)));
  }
  tok->model_ = std::make_unique<BpeModel>(std::move(bytes), merges, false);
  if (config.contains("added_tokens_decoder"))
    for (const auto& [id, t] : config["added_tokens_decoder"].items())
      tok->added_.add(parse_added(t, static_cast<int32_t>(std::stoi(id))));
  tok->nfc_ = true;
  tok->splits_.push_back(std::make_unique<RegexSplitter>(kQwen2Regex));
  tok->finish();
  return tok;
}

void HfTokenizer::finish() {
  vocab_size_ = std::max(model_->size(), added_.max_id() + 1);
  SpecialIds s;
  if (!prefix_.empty()) s.bos = prefix_.front();
  s.add_bos = !prefix_.empty();
  s.eos = known_end_ids(*this);
  set_specials(std::move(s));
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  std::vector<int32_t> ids;
  if (opts.add_special) ids = prefix_;
  std::vector<std::string_view> words, next;
  for (const TextPiece& piece : added_.split(text, opts.parse_special)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    std::string normalized = nfc_ ? utf8_nfc(piece.text) : std::string(piece.text);
    if (prefix_space_ && !normalized.empty() && normalized[0] != ' ') normalized.insert(0, 1, ' ');
    words.assign(1, normalized);
    for (const auto& splitter : splits_) {
      next.clear();
      for (const std::string_view w : words) splitter->split(w, next);
      words.swap(next);
    }
    for (const std::string_view w : words) model_->encode_word(w, ids);
  }
  if (opts.add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::token_bytes(int32_t id, bool skip_special) const {
  require_id(id);
  if (const AddedToken* t = added_.find(id)) return t->special && skip_special ? std::string() : t->content;
  return id < model_->size() ? model_->bytes(id) : std::string();
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_.find(id);
  return t != nullptr && t->special;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.id_of(token)) return id;
  return model_->id(token_to_bytes(std::string(token)));
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  require_id(id);
  if (const AddedToken* t = added_.find(id)) return t->content;
  return static_cast<size_t>(id) < token_text_.size() ? token_text_[static_cast<size_t>(id)] : std::string();
}

}  // namespace inferscale
