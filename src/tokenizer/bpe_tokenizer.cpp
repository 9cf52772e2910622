#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {
namespace {

// The raw bytes of a byte-level token string; a string outside the alphabet stands for itself.
std::string token_to_bytes(const std::string& token) {
  auto bytes = byte_level_decode(token);
  return bytes ? std::move(*bytes) : token;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeTokenizerSpec spec)
    : token_text_(std::move(spec.tokens)),
      nfc_(spec.nfc),
      prefix_space_(spec.prefix_space),
      pre_(spec.splits),
      prefix_(std::move(spec.prefix)),
      suffix_(std::move(spec.suffix)),
      kind_(std::move(spec.kind)),
      pre_name_(std::move(spec.pre_name)) {
  std::vector<std::string> bytes;
  bytes.reserve(token_text_.size());
  for (const std::string& t : token_text_) bytes.push_back(t.empty() ? std::string() : token_to_bytes(t));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(spec.merges.size());
  for (const auto& [a, b] : spec.merges) merges.emplace_back(token_to_bytes(a), token_to_bytes(b));
  model_ = std::make_unique<BpeModel>(std::move(bytes), merges, spec.ignore_merges);
  for (AddedToken& t : spec.added) added_.add(std::move(t));
  vocab_size_ = std::max(model_->size(), added_.max_id() + 1);
  for (const int32_t id : prefix_) require_id(id);
  for (const int32_t id : suffix_) require_id(id);
  SpecialIds s;
  if (!prefix_.empty()) s.bos = prefix_.front();
  s.add_bos = !prefix_.empty();
  s.eos = known_end_ids(*this);
  set_specials(std::move(s));
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  std::vector<int32_t> ids;
  if (opts.add_special) ids = prefix_;
  for (const TextPiece& piece : added_.split(text, opts.parse_special)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    std::string normalized = nfc_ ? utf8_nfc(piece.text) : std::string(piece.text);
    if (prefix_space_ && !normalized.empty() && normalized[0] != ' ') normalized.insert(0, 1, ' ');
    for (const std::string_view w : pre_.split(normalized)) model_->encode_word(w, ids);
  }
  if (opts.add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  std::vector<std::string> out;
  for (const std::string_view w : pre_.split(text)) out.emplace_back(w);
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id, bool skip_special) const {
  require_id(id);
  if (const AddedToken* t = added_.find(id)) return t->special && skip_special ? std::string() : t->content;
  return id < model_->size() ? model_->bytes(id) : std::string();
}

bool BpeTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_.find(id);
  return t != nullptr && t->special;
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.id_of(token)) return id;
  return model_->id(token_to_bytes(std::string(token)));
}

std::string BpeTokenizer::id_to_token(int32_t id) const {
  require_id(id);
  if (const AddedToken* t = added_.find(id)) return t->content;
  return static_cast<size_t>(id) < token_text_.size() ? token_text_[static_cast<size_t>(id)] : std::string();
}

}  // namespace inferscale
