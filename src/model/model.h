// A loaded model: config, weights (in their stored dtype, often a view into a mapped file),
// tokenizer and chat template. `load_model` understands:
//   "demo"                      built-in deterministic random Llama + byte tokenizer (the default);
//                               LoadOptions::seed picks other weights
//   DIR                         HF layout: config.json + model.safetensors or sharded index,
//                               tokenizer.json / tokenizer.model, tokenizer_config.json,
//                               generation_config.json (the default sampling)
//   FILE.gguf                   GGUF v2/v3, llama architecture, vocab inside; F32/F16/BF16 tensors
//                               and the block types Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q2_K..Q6_K (kept as
//                               stored; the backends dequantize them)
//   DIR or config.json with LoadOptions::random_weights: seeded random weights of that shape
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/generation_config.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferscale {

struct LoadOptions {
  bool random_weights = false;
  uint64_t seed = 0;
  DType random_dtype = DType::kF32;  // random weights: f32, f16 or bf16 (bf16 fits Llama-3.1-8B in 16 GB)
  std::string tokenizer_path;  // overrides the tokenizer found beside the model
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::shared_ptr<const Tokenizer> tokenizer;  // never null after load_model
  ChatTemplate chat_template;
  std::string name;        // short name for listings (/v1/models)
  std::string source;      // what was loaded: a path or "demo"
  bool random_weights = false;  // its text is meaningless
  // What a request gets for the sampling fields it does not set (generation_config.h): the
  // model's generation_config.json or GGUF sampling keys over llama.cpp's defaults.
  SamplingDefaults sampling;
  // Identifies weights + tokenizer for KV fingerprints: changes whenever the numbers could.
  std::string fingerprint;
};

Model load_model(const std::string& spec, const LoadOptions& opts = {});

// Seeded random weights of cfg's shape in `dtype` (f32, f16 or bf16) at a sane scale
// (~normal(0, 0.02), norms 1). Deterministic in (cfg, seed, dtype), whatever the thread count.
ModelWeights make_random_weights(const ModelConfig& cfg, uint64_t seed, DType dtype = DType::kF32);

// The built-in demo model's config: a small Llama (hidden 256, 4 layers, 8 heads, 4 kv heads,
// head_dim 32, FFN 688, 8,192 positions) over the byte tokenizer's 260 ids.
ModelConfig demo_config();

}  // namespace inferscale
