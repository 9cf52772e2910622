#include "tokenizer/spm_tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>

#include "tokenizer/spm_proto.h"
#include "tokenizer/spm_text.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {
SpmTokenizer::SpmTokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SpmTokenizer::~SpmTokenizer() = default;

std::shared_ptr<SpmTokenizer> SpmTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  IS_REQUIRE(in.good(), kNotFound, "cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::shared_ptr<SpmTokenizer> tok(new SpmTokenizer());
  const std::string proto = spm_set_add_dummy_prefix(ss.str(), false, tok->dummy_prefix_, path);
  // The library answers most bad models with a status, but throws for some (its trie builder
  // throws Darts' exception for an empty piece): both are a model file we cannot use.
  sentencepiece::util::Status status;
  try {
    status = tok->sp_->LoadFromSerializedProto(proto);
  } catch (const std::exception& e) {
    IS_THROW(kInvalidInput, "{}: not a SentencePiece model: {}", path, e.what());
  }
  IS_REQUIRE(status.ok(), kInvalidInput, "{}: not a SentencePiece model: {}", path, status.ToString());

  const int n = tok->sp_->GetPieceSize();
  tok->pieces_.resize(n);
  tok->bytes_.resize(n);
  tok->special_.resize(n);
  for (int id = 0; id < n; ++id) {
    const std::string& piece = tok->sp_->IdToPiece(id);
    tok->pieces_[id] = piece;
    if (tok->sp_->IsControl(id) || tok->sp_->IsUnknown(id)) {
      tok->special_[id] = true;
      tok->bytes_[id] = piece;
      tok->specials_text_.add({id, piece, true});
    } else if (const int b = tok->sp_->IsByte(id) ? spm_byte_piece(piece) : -1; b >= 0) {
      tok->bytes_[id] = std::string(1, static_cast<char>(b));
    } else {
      tok->bytes_[id] = spm_unescape(piece);
    }
  }
  SpecialIds s;
  if (tok->sp_->bos_id() >= 0) s.bos = tok->sp_->bos_id();
  if (tok->sp_->eos_id() >= 0) s.eos.push_back(tok->sp_->eos_id());
  s.add_bos = s.bos.has_value();
  tok->set_specials(std::move(s));
  return tok;
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  std::vector<int32_t> ids;
  if (opts.add_special && specials_.add_bos && specials_.bos) ids.push_back(*specials_.bos);
  std::vector<int> piece_ids;
  for (const TextPiece& piece : specials_text_.split(text, opts.parse_special)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    // The dummy prefix: only at the start of the input, and not when a space is already there.
    std::string s(piece.text);
    if (dummy_prefix_ && piece.offset == 0 && s[0] != ' ') s.insert(0, 1, ' ');
    const auto status = sp_->Encode(s, &piece_ids);
    IS_CHECK(status.ok(), "sentencepiece Encode failed: {}", status.ToString());
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

std::string SpmTokenizer::token_bytes(int32_t id, bool skip_special) const {
  require_id(id);
  return special_[id] && skip_special ? std::string() : bytes_[id];
}

bool SpmTokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

std::optional<int32_t> SpmTokenizer::token_to_id(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  // PieceToId answers unk_id for unknown pieces; only "<unk>" itself maps there.
  if (id < 0 || (id == sp_->unk_id() && token != pieces_[id])) return std::nullopt;
  return id;
}

std::string SpmTokenizer::id_to_token(int32_t id) const {
  require_id(id);
  return pieces_[id];
}

}  // namespace inferscale
