// Finds and loads a model's tokenizer and chat template.
//
// `path` is a model directory, a tokenizer file or a .gguf model (its metadata only: the `llama`
// vocabulary of gguf_vocab.h or the `gpt2` one of gguf_bpe.h, and tokenizer.chat_template). In a
// directory, the first that exists wins:
//   tokenizer.json                       HF byte-level BPE (Llama 3, Qwen2.5)
//   tokenizer.model, tokenizer.model.v3  SentencePiece (Mistral)
//   vocab.json + merges.txt              Qwen2Tokenizer slow files (needs tokenizer_config.json)
// tokenizer_config.json beside it, when present, refines BOS/EOS (bos_token, eos_token,
// add_bos_token) and gives the chat template (chat_template). The template is resolved by
// resolve_chat_template. Missing or malformed files: an Error naming the file.
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
// kChatML, [INST] -> kMistral; else kNone), for models without a usable chat template.
ChatFamily guess_chat_family(const Tokenizer& tok);

// The chat template a model gets from its template source (`jinja`, "" when it ships none) and
// vocabulary; `origin` names the model in log lines. The rule (also in docs/API.md):
//   1. a source of a known family (ChatTemplate::detect) -> that family, ChatML with the default
//      system prompt the source writes (ChatTemplate::chatml_default_system);
//   2. a source we do not recognize -> guess_chat_family(tok) when it finds one (a guessed ChatML
//      has no default system prompt), else kPlain, with a note;
//   3. no source -> guess_chat_family(tok), else kPlain, with a note (a base model: chat requests
//      are served in the plain format).
// A ChatML source with reasoning blocks (<think>, Qwen3) also gets a note: they are not rendered.
// The note (ChatTemplate::note) is for the loader of a chat model to log; an encoder has none.
ChatTemplate resolve_chat_template(const std::string& jinja, const Tokenizer& tok, std::string bos_text,
                                   std::string eos_text, const std::string& origin);

}  // namespace inferscale
