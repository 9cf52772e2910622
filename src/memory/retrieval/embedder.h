// Text -> vector. Vectors are stored per embedder name (FactStore embeddings table), so two
// embedders never mix; a model-backed embedder puts the model and pooling in its name.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {

class Embedder {
 public:
  virtual ~Embedder() = default;
  // Stable identifier, the key of stored vectors ("qwen3-embedding-0.6b:last:l2").
  virtual std::string name() const = 0;
  virtual int32_t dim() const = 0;
  // Document vectors: [texts.size(), dim] row-major.
  virtual std::vector<float> embed(std::span<const std::string> texts) = 0;
  // The vector of a search query ([dim]). Instruction-tuned embedders prefix queries; the
  // default embeds the text as a document.
  virtual std::vector<float> embed_query(std::string_view query);
};

}  // namespace inferscale
