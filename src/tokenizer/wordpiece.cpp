#include "tokenizer/wordpiece.h"

#include <algorithm>

#include "tokenizer/hf_json.h"
#include "tokenizer/json_file.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {
namespace {

using nlohmann::json;

// Characters of valid UTF-8 (lead bytes counted).
size_t char_count(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; }));
}

// The largest end <= `end` that is a character boundary of `s` and > `start` (or `start` when none).
size_t boundary_at_or_before(std::string_view s, size_t start, size_t end) {
  while (end > start && end < s.size() && (static_cast<uint8_t>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace

std::shared_ptr<WordPieceTokenizer> WordPieceTokenizer::from_file(const std::string& path) {
  return from_json(read_tokenizer_json(path), path);
}

std::shared_ptr<WordPieceTokenizer> WordPieceTokenizer::from_json(const json& j, const std::string& source) {
  std::shared_ptr<WordPieceTokenizer> t(new WordPieceTokenizer());
  auto unsupported = [&](const std::string& what) { IS_THROW(kUnsupported, "{}: unsupported {}", source, what); };
  try {
    // --- model
    const json& m = j.at("model");
    IS_REQUIRE(hf_type_of(m) == "WordPiece", kInvalidInput, "{}: model type is '{}', not WordPiece", source,
               hf_type_of(m));
    for (const auto& [token, id_json] : m.at("vocab").items()) {
      const int32_t id = hf_token_id(id_json, source, "vocab '" + token + "'");
      if (static_cast<size_t>(id) >= t->tokens_.size()) t->tokens_.resize(static_cast<size_t>(id) + 1);
      t->tokens_[static_cast<size_t>(id)] = token;
      t->vocab_[token] = static_cast<int32_t>(id);
      t->max_token_bytes_ = std::max(t->max_token_bytes_, token.size());
    }
    if (m.contains("continuing_subword_prefix") && m["continuing_subword_prefix"].is_string())
      t->prefix_ = m["continuing_subword_prefix"].get<std::string>();
    if (m.contains("max_input_chars_per_word") && !m["max_input_chars_per_word"].is_null())
      t->max_chars_ = hf_size(m["max_input_chars_per_word"], source, "model.max_input_chars_per_word", size_t{1} << 30);
    const std::string unk = m.value("unk_token", "[UNK]");
    const auto unk_it = t->vocab_.find(unk);
    IS_REQUIRE(unk_it != t->vocab_.end(), kInvalidInput, "{}: unk_token '{}' is not in the vocabulary", source, unk);
    t->unk_id_ = unk_it->second;

    // --- added tokens
    if (j.contains("added_tokens"))
      for (const json& a : j["added_tokens"]) t->added_.add(hf_added_token(a, hf_token_id(a.at("id"), source, "added_tokens")));

    // --- normalizer: BertNormalizer or none
    const json n = j.value("normalizer", json());
    if (!n.is_null()) {
      if (hf_type_of(n) != "BertNormalizer") unsupported("normalizer type '" + hf_type_of(n) + "' for WordPiece");
      t->normalize_ = true;
      t->norm_.clean_text = n.value("clean_text", true);
      t->norm_.handle_chinese_chars = n.value("handle_chinese_chars", true);
      t->norm_.lowercase = n.value("lowercase", true);
      const json& sa = n.contains("strip_accents") ? n["strip_accents"] : json();
      t->norm_.strip_accents = sa.is_boolean() ? sa.get<bool>() : t->norm_.lowercase;  // null: follows lowercase
    }

    // --- pre-tokenizer: BertPreTokenizer only
    const json p = j.value("pre_tokenizer", json());
    if (hf_type_of(p) != "BertPreTokenizer")
      unsupported("pre_tokenizer type '" + (p.is_null() ? std::string("null") : hf_type_of(p)) + "' for WordPiece");

    // --- post-processor: TemplateProcessing, BertProcessing or none
    const json post = j.value("post_processor", json());
    if (hf_type_of(post) == "TemplateProcessing") {
      hf_template_single(post, source, t->head_, t->tail_);
    } else if (hf_type_of(post) == "BertProcessing") {  // {"cls": ["[CLS]", 101], "sep": ["[SEP]", 102]}
      t->head_.push_back(hf_token_id(post.at("cls").at(1), source, "post_processor.cls"));
      t->tail_.push_back(hf_token_id(post.at("sep").at(1), source, "post_processor.sep"));
    } else if (!post.is_null()) {
      unsupported("post_processor type '" + hf_type_of(post) + "' for WordPiece");
    }

    // --- decoder: WordPiece or none
    const json d = j.value("decoder", json());
    if (hf_type_of(d) == "WordPiece") {
      IS_REQUIRE(d.value("prefix", t->prefix_) == t->prefix_, kUnsupported,
                 "{}: the WordPiece decoder's prefix differs from the model's continuing_subword_prefix", source);
      t->cleanup_ = d.value("cleanup", true);
    } else if (!d.is_null()) {
      unsupported("decoder type '" + hf_type_of(d) + "' for WordPiece");
    }

    // --- truncation (padding is a batch matter: the encoder masks its own padding)
    const json tr = j.value("truncation", json());
    if (!tr.is_null()) {
      WordPieceTruncation w;
      w.max_length = hf_size(tr.at("max_length"), source, "truncation.max_length", size_t{1} << 30);
      w.left = tr.value("direction", "Right") == "Left";
      t->truncation_ = w;
    }
  } catch (const json::exception& e) {
    IS_THROW(kInvalidInput, "{}: malformed tokenizer.json: {}", source, e.what());
  }
  t->vocab_size_ = std::max(static_cast<int32_t>(t->tokens_.size()), t->added_.max_id() + 1);
  for (const int32_t id : t->head_) t->require_id(id);
  for (const int32_t id : t->tail_) t->require_id(id);
  SpecialIds s;  // BERT has no BOS/EOS; [CLS] opens and [SEP] ends a sequence
  if (!t->head_.empty()) s.bos = t->head_.front();
  s.add_bos = !t->head_.empty();
  if (!t->tail_.empty()) s.eos.push_back(t->tail_.back());
  t->set_specials(std::move(s));
  return t;
}

void WordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (char_count(word) > max_chars_) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first = out.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    // Longest vocabulary entry at `start`: shrink the end one character at a time.
    const size_t budget = max_token_bytes_ - (start > 0 ? std::min(prefix_.size(), max_token_bytes_) : 0);
    size_t end = boundary_at_or_before(word, start, std::min(word.size(), start + budget));
    int32_t id = -1;
    while (end > start) {
      piece.assign(start > 0 ? prefix_ : std::string());
      piece.append(word.substr(start, end - start));
      if (const auto it = vocab_.find(piece); it != vocab_.end()) {
        id = it->second;
        break;
      }
      end = boundary_at_or_before(word, start, end - 1);
    }
    if (id < 0) {  // nothing matches here: the whole word is unknown
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  std::vector<int32_t> ids;
  if (opts.add_special) ids = head_;
  for (const TextPiece& piece : added_.split(text, opts.parse_special)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    const std::string normalized = normalize_ ? bert_normalize(piece.text, norm_) : std::string(piece.text);
    for (const std::string_view w : bert_pre_tokenize(normalized)) encode_word(w, ids);
  }
  if (opts.add_special) ids.insert(ids.end(), tail_.begin(), tail_.end());
  return ids;
}

std::vector<int32_t> WordPieceTokenizer::encode_truncated(std::string_view text, size_t max_length,
                                                          const EncodeOptions& opts, bool left) const {
  const size_t specials = opts.add_special ? head_.size() + tail_.size() : 0;
  IS_REQUIRE(max_length >= specials, kInvalidInput, "truncation to {} ids leaves no room for the {} special tokens",
             max_length, specials);
  EncodeOptions plain = opts;
  plain.add_special = false;
  std::vector<int32_t> body = encode(text, plain);
  const size_t room = max_length - specials;
  if (body.size() > room) {
    if (left) body.erase(body.begin(), body.end() - static_cast<std::ptrdiff_t>(room));
    else body.resize(room);
  }
  if (!opts.add_special) return body;
  std::vector<int32_t> ids = head_;
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), tail_.begin(), tail_.end());
  return ids;
}

std::vector<std::string> WordPieceTokenizer::pre_tokenize(std::string_view text) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  const std::string normalized = normalize_ ? bert_normalize(text, norm_) : std::string(text);
  std::vector<std::string> out;
  for (const std::string_view w : bert_pre_tokenize(normalized)) out.emplace_back(w);
  return out;
}

std::string WordPieceTokenizer::token_bytes(int32_t id, bool skip_special) const {
  require_id(id);
  if (const AddedToken* t = added_.find(id)) return t->special && skip_special ? std::string() : " " + t->content;
  const std::string& tok = static_cast<size_t>(id) < tokens_.size() ? tokens_[static_cast<size_t>(id)] : std::string();
  if (tok.empty()) return {};
  if (tok.size() > prefix_.size() && tok.compare(0, prefix_.size(), prefix_) == 0) return tok.substr(prefix_.size());
  // The decoder's cleanup joins these to the word before (" ." -> "."); its other rules need
  // several tokens (" n't", " 's") that a BERT vocabulary never has as one.
  if (cleanup_ && (tok == "." || tok == "?" || tok == "!" || tok == ",")) return tok;
  return " " + tok;
}

bool WordPieceTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_.find(id);
  return t != nullptr && t->special;
}

std::optional<int32_t> WordPieceTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.id_of(token)) return id;
  if (const auto it = vocab_.find(std::string(token)); it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::string WordPieceTokenizer::id_to_token(int32_t id) const {
  require_id(id);
  if (const AddedToken* t = added_.find(id)) return t->content;
  return static_cast<size_t>(id) < tokens_.size() ? tokens_[static_cast<size_t>(id)] : std::string();
}

}  // namespace inferscale
