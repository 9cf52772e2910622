#include "memory/retrieval/model_embedder.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "engine/packed_prefill.h"
#include "model/fingerprint.h"
#include "util/check.h"

namespace inferscale {
namespace {

// Sequences handed to one hidden_states() call: bounds the [sum(len), hidden] floats it returns.
constexpr size_t kSeqsPerCall = 32;

// Everything that decides a stored vector: the model's numbers and tokenizer, pooling, truncation
// and the appended id. The query prefix is left out: it changes queries, not stored vectors.
std::string derived_name(const Model& m, const ModelEmbedderOptions& o) {
  Fingerprinter fp;
  fp.add(m.fingerprint).add(pooling_name(o.pooling)).add(o.normalize ? 1 : 0).add(static_cast<uint64_t>(o.max_tokens));
  fp.add(o.eos_id ? static_cast<uint64_t>(*o.eos_id) : ~uint64_t{0});
  const std::string hex = fp.hex();  // "xxh3:" + 16 hex digits
  return fmt::format("{}:{}:{}:{}", m.name.substr(0, 160), pooling_name(o.pooling), o.normalize ? "l2" : "raw",
                     hex.substr(hex.size() - 8));
}

}  // namespace

std::optional<int32_t> default_embedder_eos(const Tokenizer& tok, Pooling pooling) {
  if (pooling != Pooling::kLastToken) return std::nullopt;
  if (auto id = tok.token_to_id("<|endoftext|>"); id && tok.is_special(*id)) return id;
  const std::vector<int32_t> ends = tok.eos_ids();
  if (ends.empty()) return std::nullopt;
  return ends.front();
}

int64_t embedder_cache_blocks(const ModelEmbedderOptions& o, int32_t block_size) {
  // One forward's tokens, a quarter more for the partly filled last block of each short text,
  // plus one whole text that may be admitted when the budget is nearly spent.
  const int64_t tokens = int64_t{o.max_batch_tokens} * 5 / 4 + o.max_tokens;
  return (tokens + block_size - 1) / block_size + 1;
}

ModelEmbedder::ModelEmbedder(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
                             ModelEmbedderOptions opts)
    : model_(std::move(model)),
      backend_(std::move(backend)),
      opts_(std::move(opts)),
      blocks_(backend_ ? backend_->num_cache_blocks() : 0, backend_ ? backend_->block_size() : 1) {
  IS_CHECK(model_ != nullptr && backend_ != nullptr, "model embedder needs a model and a backend");
  IS_REQUIRE(opts_.max_tokens > 0, kInvalidInput, "embedder max_tokens must be positive, got {}", opts_.max_tokens);
  IS_REQUIRE(opts_.max_batch_tokens > 0, kInvalidInput, "embedder max_batch_tokens must be positive, got {}",
             opts_.max_batch_tokens);
  if (model_->config.is_encoder()) {
    // An encoder sees whole texts in one forward, inside its learned positions.
    opts_.max_tokens = static_cast<int32_t>(std::min<int64_t>(opts_.max_tokens, model_->config.max_position_embeddings));
    opts_.max_batch_tokens = std::max(opts_.max_batch_tokens, opts_.max_tokens);
  }
  const Tokenizer& tok = *model_->tokenizer;
  IS_REQUIRE(!opts_.eos_id || (*opts_.eos_id >= 0 && *opts_.eos_id < tok.vocab_size()), kInvalidInput,
             "embedder eos id {} is outside the vocabulary of {} ids", opts_.eos_id.value_or(-1), tok.vocab_size());
  const int64_t min_blocks = (opts_.max_tokens + backend_->block_size() - 1) / backend_->block_size();
  IS_REQUIRE(backend_->num_cache_blocks() >= min_blocks, kInvalidInput,
             "the embedder's KV cache holds {} blocks; a text of {} tokens needs {}", backend_->num_cache_blocks(),
             opts_.max_tokens, min_blocks);
  // What encode(add_special) puts around a text: find the plain encoding inside the special one.
  const std::string probe = "a";
  const auto full = tok.encode(probe, {.add_special = true, .parse_special = false});
  const auto plain = tok.encode(probe, {.add_special = false, .parse_special = false});
  const auto at = std::search(full.begin(), full.end(), plain.begin(), plain.end());
  IS_REQUIRE(!plain.empty() && at != full.end(), kUnsupported,
             "cannot tell which special tokens the {} tokenizer adds around a text", tok.kind());
  head_.assign(full.begin(), at);
  tail_.assign(at + static_cast<std::ptrdiff_t>(plain.size()), full.end());
  const int64_t fixed = static_cast<int64_t>(head_.size() + tail_.size()) + (opts_.eos_id ? 1 : 0);
  IS_REQUIRE(opts_.max_tokens > fixed, kInvalidInput, "embedder max_tokens {} leaves no room for text after {} special tokens",
             opts_.max_tokens, fixed);

  HiddenStateEmbedder::Options ho;
  ho.name = opts_.name.empty() ? derived_name(*model_, opts_) : opts_.name;
  ho.dim = static_cast<int32_t>(model_->config.hidden_size);
  ho.pooling = opts_.pooling;
  ho.normalize = opts_.normalize;
  ho.max_batch = kSeqsPerCall;
  ho.query_prefix = opts_.query_prefix;
  inner_ = std::make_unique<HiddenStateEmbedder>(
      std::move(ho), [this](std::string_view text) { return tokenize(text); },
      [this](const std::vector<std::vector<int32_t>>& batch) { return hidden_states(batch); });
}

std::vector<int32_t> ModelEmbedder::tokenize(std::string_view text) const {
  // User text never turns into special tokens.
  std::vector<int32_t> content = model_->tokenizer->encode(text, {.add_special = false, .parse_special = false});
  std::vector<int32_t> ids = head_;
  const bool add_eos = opts_.eos_id && (tail_.empty() || tail_.back() != *opts_.eos_id);
  // Truncation keeps the special tokens: [head][content[:room]][tail][eos] <= max_tokens.
  const auto room = static_cast<size_t>(opts_.max_tokens) - head_.size() - tail_.size() - (add_eos ? 1 : 0);
  if (content.size() > room)
    spdlog::info("embedder {}: a text of {} tokens is truncated to {} (max {} tokens with the special ones)", name(),
                 content.size(), room, opts_.max_tokens);
  ids.insert(ids.end(), content.begin(), content.begin() + static_cast<std::ptrdiff_t>(std::min(room, content.size())));
  ids.insert(ids.end(), tail_.begin(), tail_.end());
  if (add_eos) ids.push_back(*opts_.eos_id);
  return ids;
}

std::vector<float> ModelEmbedder::hidden_states(const std::vector<std::vector<int32_t>>& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t forwarded = 0;
  std::vector<float> hidden = embedding_hidden_states(*backend_, blocks_, opts_.max_batch_tokens, batch, opts_.pooling,
                                                      model_->config.is_encoder(), &forwarded);
  tokens_ += forwarded;
  return hidden;
}

std::vector<float> embedding_hidden_states(Backend& backend, BlockManager& blocks, int32_t max_batch_tokens,
                                           const std::vector<std::vector<int32_t>>& batch, Pooling pooling,
                                           bool whole_sequences, int64_t* forwarded) {
  const auto H = static_cast<size_t>(backend.config().hidden_size);
  std::vector<size_t> first_row(batch.size());  // row of each sequence's first token in `hidden`
  size_t total = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    first_row[s] = total;
    total += batch[s].size();
  }
  std::vector<float> hidden(total * H);  // [sum(len), H]
  PackedPrefillHooks hooks;
  hooks.purpose = "embed a text";
  hooks.output = ForwardBatch::Output::kHidden;
  hooks.whole_sequences = whole_sequences;
  // Last-token and CLS pooling read one row per sequence: only those leave the backend (the other
  // rows of `hidden` stay zero and are never read).
  hooks.wants_output = [&](PackedToken t) {
    if (pooling == Pooling::kCls) return t.pos == 0;
    return pooling != Pooling::kLastToken || static_cast<size_t>(t.pos) + 1 == batch[static_cast<size_t>(t.seq)].size();
  };
  hooks.on_output = [&](std::span<const PackedToken> rows, std::span<const float> out) {
    IS_CHECK(out.size() == rows.size() * H, "hidden states of {} floats for {} rows of {}", out.size(), rows.size(), H);
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t row = first_row[static_cast<size_t>(rows[r].seq)] + static_cast<size_t>(rows[r].pos);
      std::memcpy(&hidden[row * H], &out[r * H], H * sizeof(float));
    }
  };
  const int64_t n = packed_prefill(backend, blocks, max_batch_tokens, batch, hooks);
  if (forwarded) *forwarded = n;
  return hidden;
}

int64_t ModelEmbedder::tokens_processed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_;
}

}  // namespace inferscale
