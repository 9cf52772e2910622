// The GGUF `gpt2` vocabulary (tokenizer.ggml.model = "gpt2"): byte-level BPE from
// tokenizer.ggml.tokens and tokenizer.ggml.merges, run through BpeTokenizer's pipeline with the
// settings llama.cpp gives such a file:
// - token types (tokenizer.ggml.token_type): control (3) and unknown (2) tokens written in the text
//   become their ids when parse_special and are special (decode drops them with skip_special);
//   user-defined (4) tokens are always matched and are not special; the rest are model tokens;
// - the split regexes come from tokenizer.ggml.pre (pre_tokenizers.h: llama.cpp's names; a missing
//   name means "default", with a warning, as llama.cpp does; an unknown one is kUnsupported);
// - no NFC, no prefix space; ignore_merges for the Llama 3 group;
// - BOS/EOS from tokenizer.ggml.bos_token_id / eos_token_id; encode(add_special) puts BOS first when
//   tokenizer.ggml.add_bos_token (default: the pre-tokenizer's, false but for Llama 3) and EOS last
//   when tokenizer.ggml.add_eos_token (default false). Generation ends on EOS, the file's eot/eom
//   ids and the usual end-of-turn tokens present as special tokens (known_end_ids).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"

namespace inferscale {

struct GgufBpeArrays {
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, byte-level spelling
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "left right" in rank order
  std::vector<int32_t> types;       // tokenizer.ggml.token_type (GgufTokenType); empty: all normal
  std::string pre;                  // tokenizer.ggml.pre; "" when absent
  int32_t bos_id = -1, eos_id = -1;  // -1: none
  std::vector<int32_t> end_ids;     // tokenizer.ggml.eot_token_id / eom_token_id when set
  std::optional<bool> add_bos, add_eos;  // tokenizer.ggml.add_bos_token / add_eos_token when set
};

// Throws kInvalidInput naming the problem (arrays of different lengths, ids out of range, a merge
// that is not two tokens of the vocabulary, add_bos without a BOS id) and kUnsupported for an
// unknown pre-tokenizer name. kind() is "gguf-bpe", pre_tokenizer() the file's name.
std::shared_ptr<BpeTokenizer> make_gguf_bpe_tokenizer(GgufBpeArrays a);

}  // namespace inferscale
