// The split regexes of byte-level BPE vocabularies, in one place: the ones HF tokenizer.json files
// imply (ByteLevel's GPT-2 split, Qwen2's slow-tokenizer split) and the pre-tokenizers a GGUF names
// in `tokenizer.ggml.pre`, with llama.cpp's names and regex sequences (src/llama-vocab.cpp,
// llm_tokenizer_bpe). The regexes are written as HF tokenizers writes them ((?i:'s|...) where
// llama.cpp spells the cases out; GPT-2's trailing `|\s+`, which llama.cpp leaves to the unmatched
// gaps and which splits the same), so PCRE2 (RegexSplitter) runs them as HF's Oniguruma does.
#pragma once
#include <string>
#include <vector>

namespace inferscale {

// GPT-2's split: ByteLevel(use_regex=true), llama.cpp's `gpt-2`.
extern const char* const kGpt2SplitRegex;
// Llama 3's split (numbers in runs of up to 3 digits): llama.cpp's `llama-bpe`.
extern const char* const kLlama3SplitRegex;
// Qwen2's split (single digits): Qwen2Tokenizer's slow files, llama.cpp's `qwen2`.
extern const char* const kQwen2SplitRegex;

struct GgufPreTokenizer {
  std::string name;             // the canonical name of the group (llama.cpp's pre type)
  std::vector<std::string> regexes;  // applied in order, each to every piece of the last (RegexPreTokenizer)
  bool ignore_merges = false;   // a word that is itself a token is emitted whole (Llama 3)
  bool add_bos = false;         // llama.cpp's default when the file has no tokenizer.ggml.add_bos_token
};

// The pre-tokenizer of a `tokenizer.ggml.pre` value. Known names (aliases map to the group of the
// same regexes, as in llama.cpp):
//   default                                       llama.cpp's fallback: punctuation runs, GPT-2, digit runs, 3 digits
//   gpt-2 gpt2 phi-2 mpt olmo jais                GPT-2
//   llama-bpe llama3 llama-v3 falcon3 pixtral     Llama 3 (ignore_merges, BOS by default)
//   dbrx smaug-bpe                                Llama 3's regex only
//   qwen2 deepseek-r1-qwen megrez stablelm2       Qwen2
//   smollm starcoder refact command-r codeshell exaone minerva-7b
//                                                 every digit alone, then GPT-2
// Anything else throws kUnsupported listing the known names.
const GgufPreTokenizer& gguf_pre_tokenizer(const std::string& name);
std::vector<std::string> gguf_pre_tokenizer_names();

}  // namespace inferscale
