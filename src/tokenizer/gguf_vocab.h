// The GGUF `llama` vocabulary: SentencePiece-style BPE with scores and byte fallback, tokenized as
// llama.cpp does (its SPM tokenizer):
// - control/unknown tokens written in the text become their ids when parse_special; user-defined
//   tokens always;
// - a dummy-prefix ' ' goes in front of every text piece that starts the input or follows a
//   special token (add_space_prefix), then ' ' -> "▁";
// - symbols start as single code points; the adjacent pair whose concatenation is a token with the
//   highest score merges first (leftmost on ties), until no pair is a token;
// - a final symbol that is not a token is split back along its merges, and what is still unknown
//   falls back to <0xXX> byte tokens.
// Decoding follows HF's converted tokenizer: "▁" -> ' ', byte tokens -> bytes, the first leading
// space dropped, control/unknown tokens dropped when skip_special.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/tokenizer_base.h"

namespace inferscale {

class GgufFile;

// GGUF token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct GgufVocabArrays {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;  // -1: none
  bool add_bos = true;           // tokenizer.ggml.add_bos_token (llama.cpp's default for SPM)
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix
};

class GgufSpmTokenizer : public TokenizerBase {
 public:
  // Throws kInvalidInput naming the problem when the arrays disagree in length or lack byte tokens.
  explicit GgufSpmTokenizer(GgufVocabArrays v);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string token_bytes(int32_t id, bool skip_special) const override;
  bool strips_leading_space() const override { return v_.add_space_prefix; }
  int32_t vocab_size() const override { return static_cast<int32_t>(v_.tokens.size()); }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string kind() const override { return "gguf-spm"; }

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  GgufTokenType type(int32_t id) const { return static_cast<GgufTokenType>(v_.types[static_cast<size_t>(id)]); }

  GgufVocabArrays v_;
  std::unordered_map<std::string, int32_t> ids_;
  int32_t byte_ids_[256];
  AddedVocab specials_text_;     // control, unknown (special) and user-defined (not special) tokens
  std::vector<std::string> bytes_;  // decoded bytes per id
};

// The tokenizer of a GGUF file: tokenizer.ggml.model "llama" -> GgufSpmTokenizer, "gpt2" -> the
// byte-level BPE of gguf_bpe.h; kUnsupported for other models. Reads metadata only, so a file opened
// with GgufFile::open_metadata will do. Errors name the file.
std::shared_ptr<const Tokenizer> make_gguf_tokenizer(const GgufFile& file);

}  // namespace inferscale
