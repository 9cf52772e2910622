// ModelConfig: the one description of a model's shape, read from an HF config.json (or GGUF metadata).
// Required keys are read with .at() (a missing one is an error naming it); optional keys have
// explicit defaults; derived values are computed in finalize() and nowhere else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace inferscale {

// kBert: BertModel encoders (model/bert.cpp); the others are the Llama family (model/llama.cpp).
enum class Arch { kLlama, kQwen2, kQwen3, kMistral, kBert };
std::string arch_name(Arch a);

enum class RopeType { kDefault, kLinear, kLlama3, kYarn };

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;           // 0 = absent
  double mscale_all_dim = 0.0;   // 0 = absent
  double attention_factor = 0.0; // 0 = absent: derived
  bool truncate = true;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;   // the HF class name, e.g. "LlamaForCausalLM"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;       // explicit in config.json or hidden_size / num_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // RMSNorm over each q and k head before RoPE (Qwen3)
  bool rope_interleaved = false;  // rotate adjacent pairs (GGUF/llama2.c); HF rotates halves
  int32_t bos_token_id = -1;      // -1 = none
  std::vector<int32_t> eos_token_ids;
  std::string torch_dtype = "float32";
  // BERT (Arch::kBert): LayerNorm epsilon, token-type vocabulary (segment embeddings); learned
  // absolute positions up to max_position_embeddings; exact (erf) GELU.
  double layer_norm_eps = 1e-12;
  int64_t type_vocab_size = 0;
  bool is_encoder() const { return arch == Arch::kBert; }

  // Derived (finalize()).
  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  int64_t gqa_group() const { return num_heads / num_kv_heads; }

  // Parses an HF config.json object. Throws Error(kInvalidInput/kUnsupported) naming the key or architecture.
  static ModelConfig from_hf_json(const nlohmann::json& j);
  static ModelConfig from_hf_file(const std::string& path);
  // Fills derived/default values and validates the combination (e.g. heads divisible by kv heads).
  void finalize();
  // Stable text of everything that changes a forward's numbers (used in KV fingerprints).
  std::string fingerprint() const;
  nlohmann::json to_json() const;
  // Bytes of weights and of KV per token at a given element size.
  int64_t num_parameters() const;
  int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * num_layers * kv_size() * elem_bytes; }
};

}  // namespace inferscale
