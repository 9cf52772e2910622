// The tokenizer interface: text <-> token ids. Implementations: byte-level BPE (bpe_tokenizer.h) from
// an HF tokenizer.json or Qwen2 slow files (hf_tokenizer.h) or a GGUF `gpt2` vocabulary
// (gguf_bpe.h), SentencePiece models such as Mistral v3's tokenizer.model (spm_tokenizer.h), the
// GGUF `llama` vocabulary with scores and byte fallback (gguf_vocab.h), and the byte tokenizer of
// the built-in demo model. load_tokenizer.h finds and
// loads the right one for a model directory or file. All are immutable after loading and safe to
// use from several threads.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {

struct EncodeOptions {
  bool add_special = false;    // prepend BOS (and whatever the tokenizer's post-processor adds)
  bool parse_special = true;   // text like "<|eot_id|>" becomes the special token, not its characters
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const = 0;
  // The text of `ids`; special tokens are dropped when skip_special. Invalid UTF-8 becomes U+FFFD,
  // as HF tokenizers does.
  //
  // Decoding is defined as a left fold over token_bytes() so that IncrementalDecoder can stream it:
  // concatenate the pieces, drop one leading ' ' from the first non-empty piece when
  // strips_leading_space(), then replace invalid UTF-8 (maximal subparts -> U+FFFD). The default
  // implementation does exactly that; an override must keep the same result.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;
  // The raw bytes token `id` adds to decoded text: possibly part of a UTF-8 character, any leading
  // space kept; empty for a special token when skip_special. Throws kInvalidInput for an id out of range.
  virtual std::string token_bytes(int32_t id, bool skip_special) const = 0;
  // True when decoding drops the space the encoder put before the first word (SentencePiece's
  // dummy prefix): "▁Hello" decodes to "Hello" at the start of the text, " Hello" elsewhere.
  virtual bool strips_leading_space() const { return false; }

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // Token ids that end generation (eos and, for chat models, end-of-turn tokens).
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;
  // True when encode(..., add_special=true) prepends BOS.
  virtual bool adds_bos() const = 0;
  // Short name of the kind ("bpe", "gguf-bpe", "sentencepiece", "gguf-spm", "byte") for `info` and
  // fingerprints.
  virtual std::string kind() const = 0;
  // The pre-tokenizer's name for `info` ("smollm", "llama-bpe", ... for a GGUF; "tokenizer.json"); ""
  // when the kind has none.
  virtual std::string pre_tokenizer() const { return {}; }
};

// Streams text out of a growing list of token ids without ever emitting broken UTF-8: text is
// released only once the bytes decoded so far end on a complete character. Invariant: the
// concatenation of every push() and the final flush() equals tok.decode(all ids, skip_special).
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tok, bool skip_special = true) : tok_(tok), skip_special_(skip_special) {}
  // Appends one id and returns the newly completed text (may be empty).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete character at the end becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;             // bytes decoded but not yet emitted: an incomplete character
  bool seen_bytes_ = false;         // a non-empty piece was decoded (the leading space is settled)
};

}  // namespace inferscale
