// ModelConfig from GGUF `llama.*` metadata (llama.cpp's key names).
#include <cstring>

#include "model/gguf.h"
#include "util/check.h"

namespace inferscale {

namespace {
bool same_tensor(const GgufFile& f, const std::string& a, const std::string& b) {
  if (!f.has_tensor(a) || !f.has_tensor(b)) return false;
  const HostTensor& x = f.tensor(a);
  const HostTensor& y = f.tensor(b);
  return x.dtype == y.dtype && x.shape == y.shape && std::memcmp(x.data, y.data, x.nbytes()) == 0;
}
}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  IS_REQUIRE(arch == "llama", kUnsupported, "{}: GGUF architecture '{}' is not supported (only llama)", f.path(), arch);
  const std::string p = arch + ".";
  auto opt_int = [&](const std::string& key, int64_t def) { return f.has(key) ? f.get_int(key) : def; };

  ModelConfig c;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = f.get_int(p + "embedding_length");
  c.intermediate_size = f.get_int(p + "feed_forward_length");
  c.num_layers = f.get_int(p + "block_count");
  c.num_heads = f.get_int(p + "attention.head_count");
  c.num_kv_heads = opt_int(p + "attention.head_count_kv", c.num_heads);
  c.max_position_embeddings = f.get_int(p + "context_length");
  c.rms_norm_eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
  c.rope_theta = f.has(p + "rope.freq_base") ? f.get_float(p + "rope.freq_base") : 10000.0;
  IS_REQUIRE(c.num_heads > 0, kInvalidInput, "{}: {}attention.head_count must be positive", f.path(), p);
  c.head_dim = opt_int(p + "attention.key_length", c.hidden_size / c.num_heads);
  IS_REQUIRE(opt_int(p + "attention.value_length", c.head_dim) == c.head_dim, kUnsupported,
             "{}: different key and value head sizes are not supported", f.path());
  const int64_t rot = opt_int(p + "rope.dimension_count", c.head_dim);
  IS_REQUIRE(rot == c.head_dim, kUnsupported, "{}: partial rotary embeddings ({}rope.dimension_count={} < head_dim {}) are not supported",
             f.path(), p, rot, c.head_dim);

  // GGUF llama rotates adjacent pairs (llama.cpp's converter permutes the q/k rows of HF checkpoints).
  c.rope_interleaved = true;
  const std::string scaling = f.has(p + "rope.scaling.type") ? f.get_string(p + "rope.scaling.type") : "none";
  if (scaling == "linear") {
    c.rope_scaling.type = RopeType::kLinear;
    c.rope_scaling.factor = f.get_float(p + "rope.scaling.factor");
  } else if (scaling == "yarn") {
    c.rope_scaling.type = RopeType::kYarn;
    c.rope_scaling.factor = f.get_float(p + "rope.scaling.factor");
    c.rope_scaling.original_max_position_embeddings = opt_int(p + "rope.scaling.original_context_length", 0);
  } else if (scaling == "none") {
    if (f.has(p + "rope.scale_linear")) {  // older files
      c.rope_scaling.type = RopeType::kLinear;
      c.rope_scaling.factor = f.get_float(p + "rope.scale_linear");
    }
  } else {
    IS_THROW(kUnsupported, "{}: GGUF rope scaling type '{}' is not supported", f.path(), scaling);
  }
  // Llama 3.1 GGUFs carry their llama3 scaling as per-frequency factors in a tensor instead.
  IS_REQUIRE(!f.has_tensor("rope_freqs.weight"), kUnsupported,
             "{}: per-frequency rope factors (tensor rope_freqs.weight) are not supported", f.path());

  if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(f.array_size("tokenizer.ggml.tokens"));
  } else if (f.has(p + "vocab_size")) {
    c.vocab_size = f.get_int(p + "vocab_size");
  } else {
    c.vocab_size = f.tensor("token_embd.weight").dim(0);
  }
  c.tie_word_embeddings = !f.has_tensor("output.weight") || same_tensor(f, "output.weight", "token_embd.weight");
  c.bos_token_id = static_cast<int32_t>(opt_int("tokenizer.ggml.bos_token_id", -1));
  if (f.has("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {static_cast<int32_t>(f.get_int("tokenizer.ggml.eos_token_id"))};
  if (f.has_tensor("token_embd.weight")) {
    switch (f.tensor("token_embd.weight").dtype) {
      case DType::kF16: c.torch_dtype = "float16"; break;
      case DType::kBF16: c.torch_dtype = "bfloat16"; break;
      default: c.torch_dtype = "float32"; break;
    }
  }
  try {
    c.finalize();
  } catch (const Error& e) {
    throw Error(e.kind(), f.path() + ": " + e.what());
  }
  return c;
}

}  // namespace inferscale
