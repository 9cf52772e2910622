// Finds and loads a model's tokenizer and chat template.
//
// `path` is a model directory, a tokenizer file or a .gguf model (its `llama` vocabulary, see
// gguf_vocab.h, and tokenizer.chat_template). In a directory, the first that exists wins:
//   tokenizer.json                       HF byte-level BPE (Llama 3, Qwen2.5)
//   tokenizer.model, tokenizer.model.v3  SentencePiece (Mistral)
//   vocab.json + merges.txt              Qwen2Tokenizer slow files (needs tokenizer_config.json)
// tokenizer_config.json beside it, when present, refines BOS/EOS (bos_token, eos_token,
// add_bos_token) and gives the chat template family (chat_template). Without a template the family
// is guessed from the vocabulary's special tokens. Missing or malformed files: an Error naming the file.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale {

struct LoadedTokenizer {
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatTemplate chat;
};

LoadedTokenizer load_tokenizer(const std::string& path);

// The family whose special tokens `tok` has (<|start_header_id|> -> kLlama31, <|im_start|> ->
// kChatML, [INST] -> kMistral), for models that ship no chat template.
ChatFamily guess_chat_family(const Tokenizer& tok);

}  // namespace inferscale
