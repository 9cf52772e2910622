// The built-in demo model: a small Llama with deterministic random weights over the byte
// tokenizer, so the engine runs end to end with no files. Its text is meaningless by design.
// Sized to generate well over 50 tokens/s on two CPU cores (~3.4 M parameters).
#include "model/model.h"
#include "tokenizer/byte_tokenizer.h"

namespace inferscale {

ModelConfig demo_config() {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 256;
  c.intermediate_size = 688;
  c.num_layers = 4;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 32;
  c.vocab_size = ByteTokenizer::kVocabSize;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.bos_token_id = ByteTokenizer::kBos;
  c.eos_token_ids = {ByteTokenizer::kEos, ByteTokenizer::kImEnd};
  c.torch_dtype = "float32";
  c.finalize();
  return c;
}

}  // namespace inferscale
