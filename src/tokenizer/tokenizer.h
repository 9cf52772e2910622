// The tokenizer interface: text <-> token ids. Implementations: byte-level BPE from an HF
// tokenizer.json (Llama 3, Qwen), SentencePiece models (Mistral v3 tokenizer.model), the GGUF
// `llama` vocabulary (scores + byte fallback), and the byte tokenizer of the built-in demo model.
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
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = true) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // Token ids that end generation (eos and, for chat models, end-of-turn tokens).
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;
  // True when encode(..., add_special=true) prepends BOS.
  virtual bool adds_bos() const = 0;
  // Short name of the kind ("bpe", "sentencepiece", "gguf-spm", "byte") for `info` and fingerprints.
  virtual std::string kind() const = 0;
};

// Streams text out of a growing list of token ids without ever emitting broken UTF-8: text is
// released only once the bytes decoded so far end on a complete character.
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
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the window decoded for context
  size_t read_offset_ = 0;    // ids before this have had their text emitted
};

}  // namespace inferscale
