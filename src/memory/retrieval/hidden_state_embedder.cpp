#include "memory/retrieval/hidden_state_embedder.h"

#include <cmath>
#include <numeric>

#include "util/check.h"

namespace inferscale {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kLastToken: return "last";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
  }
  return "?";
}

std::vector<float> pool_hidden_states(std::span<const float> hidden, std::span<const int64_t> lengths, int32_t dim,
                                      Pooling pooling) {
  IS_REQUIRE(dim > 0, kInvalidInput, "hidden dim must be positive, got {}", dim);
  const auto d = static_cast<size_t>(dim);
  int64_t total = 0;
  for (int64_t len : lengths) {
    IS_REQUIRE(len > 0, kInvalidInput, "cannot pool an empty sequence");
    total += len;
  }
  IS_REQUIRE(hidden.size() == static_cast<size_t>(total) * d, kInvalidInput,
             "hidden states hold {} floats, expected {} tokens x {} = {}", hidden.size(), total, d,
             static_cast<size_t>(total) * d);
  std::vector<float> out(lengths.size() * d);
  size_t row = 0;  // first row of the current sequence
  std::vector<double> acc(d);
  for (size_t s = 0; s < lengths.size(); ++s) {
    const auto len = static_cast<size_t>(lengths[s]);
    float* dst = out.data() + s * d;
    if (pooling == Pooling::kLastToken || pooling == Pooling::kCls) {
      const float* src = hidden.data() + (pooling == Pooling::kCls ? row : row + len - 1) * d;
      std::copy(src, src + d, dst);
    } else {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t t = 0; t < len; ++t)
        for (size_t j = 0; j < d; ++j) acc[j] += hidden[(row + t) * d + j];
      for (size_t j = 0; j < d; ++j) dst[j] = static_cast<float>(acc[j] / static_cast<double>(len));
    }
    row += len;
  }
  return out;
}

void l2_normalize_rows(std::span<float> data, int32_t dim) {
  IS_REQUIRE(dim > 0 && data.size() % static_cast<size_t>(dim) == 0, kInvalidInput,
             "{} floats is not a whole number of rows of dim {}", data.size(), dim);
  const auto d = static_cast<size_t>(dim);
  for (size_t r = 0; r < data.size() / d; ++r) {
    float* v = data.data() + r * d;
    double ss = 0.0;
    for (size_t j = 0; j < d; ++j) ss += static_cast<double>(v[j]) * v[j];
    if (ss == 0.0) continue;
    const double inv = 1.0 / std::sqrt(ss);
    for (size_t j = 0; j < d; ++j) v[j] = static_cast<float>(v[j] * inv);
  }
}

HiddenStateEmbedder::HiddenStateEmbedder(Options opts, TokenizeFn tokenize, HiddenStatesFn hidden_states)
    : opts_(std::move(opts)), tokenize_(std::move(tokenize)), hidden_states_(std::move(hidden_states)) {
  IS_REQUIRE(!opts_.name.empty(), kInvalidInput, "embedder needs a name");
  IS_REQUIRE(opts_.dim > 0, kInvalidInput, "embedder '{}' needs a positive dim, got {}", opts_.name, opts_.dim);
  IS_REQUIRE(opts_.max_batch > 0, kInvalidInput, "embedder '{}' needs max_batch > 0", opts_.name);
  IS_CHECK(tokenize_ && hidden_states_, "embedder '{}' needs both callbacks", opts_.name);
}

std::vector<float> HiddenStateEmbedder::embed(std::span<const std::string> texts) {
  const auto d = static_cast<size_t>(opts_.dim);
  std::vector<float> out;
  out.reserve(texts.size() * d);
  for (size_t begin = 0; begin < texts.size(); begin += opts_.max_batch) {
    const size_t end = std::min(texts.size(), begin + opts_.max_batch);
    std::vector<std::vector<int32_t>> batch;
    std::vector<int64_t> lengths;
    for (size_t i = begin; i < end; ++i) {
      batch.push_back(tokenize_(texts[i]));
      IS_REQUIRE(!batch.back().empty(), kInvalidInput, "embedder '{}': text {} has no tokens", opts_.name, i);
      lengths.push_back(static_cast<int64_t>(batch.back().size()));
    }
    const std::vector<float> hidden = hidden_states_(batch);
    std::vector<float> pooled = pool_hidden_states(hidden, lengths, opts_.dim, opts_.pooling);
    if (opts_.normalize) l2_normalize_rows(pooled, opts_.dim);
    out.insert(out.end(), pooled.begin(), pooled.end());
  }
  return out;
}

std::vector<float> HiddenStateEmbedder::embed_query(std::string_view query) {
  const std::string q = opts_.query_prefix + std::string(query);
  return embed(std::span<const std::string>(&q, 1));
}

}  // namespace inferscale
