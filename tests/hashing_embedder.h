// A model-free embedder for retrieval tests: feature hashing of BM25 tokens, L2-normalized.
// `salt` gives another vector space under another name, like a different model would.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "memory/retrieval/bm25_index.h"
#include "memory/retrieval/embedder.h"
#include "memory/retrieval/hidden_state_embedder.h"

namespace inferscale::testing {

class HashingEmbedder final : public Embedder {
 public:
  explicit HashingEmbedder(int32_t dim, std::string salt = "") : dim_(dim), salt_(std::move(salt)) {}
  std::string name() const override { return "hash" + std::to_string(dim_) + salt_; }
  int32_t dim() const override { return dim_; }
  std::vector<float> embed(std::span<const std::string> texts) override {
    ++calls;
    embedded += texts.size();
    if (during_embed) std::exchange(during_embed, nullptr)();  // a writer racing this embedding, once
    std::vector<float> out(texts.size() * static_cast<size_t>(dim_));
    for (size_t i = 0; i < texts.size(); ++i)
      for (const std::string& t : bm25_tokenize(texts[i]))
        out[i * static_cast<size_t>(dim_) + std::hash<std::string>{}(salt_ + t) % static_cast<size_t>(dim_)] += 1.f;
    l2_normalize_rows(out, dim_);
    return out;
  }
  int calls = 0;
  size_t embedded = 0;  // texts embedded so far
  std::function<void()> during_embed;

 private:
  int32_t dim_;
  std::string salt_;
};

}  // namespace inferscale::testing
