// ModelConfig from a GGUF file's metadata (the reader itself is tensor/gguf_file.h).
#pragma once
#include "model/config.h"
#include "tensor/gguf_file.h"

namespace inferscale {

// ModelConfig from `llama.*` metadata: rope_interleaved = true (GGUF llama rotates adjacent pairs),
// vocab size from tokenizer.ggml.tokens, tied when there is no output.weight or it holds the same
// bytes as token_embd.weight (converters of tied models often write the copy). Other architectures:
// kUnsupported naming them.
ModelConfig config_from_gguf(const GgufFile& f);

}  // namespace inferscale
