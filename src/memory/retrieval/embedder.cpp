#include "memory/retrieval/embedder.h"

namespace inferscale {

std::vector<float> Embedder::embed_query(std::string_view query) {
  const std::string q(query);
  return embed(std::span<const std::string>(&q, 1));
}

}  // namespace inferscale
