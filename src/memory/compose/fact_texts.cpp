#include "memory/compose/fact_texts.h"

#include <xxhash.h>

#include "memory/compose/compose.h"

namespace inferscale {

std::vector<int32_t> FactTexts::tokens(const Fact& f) {
  auto it = tokens_.find(f.key);
  if (it != tokens_.end() && it->second.first == f.version) return it->second.second;
  const std::string text = render_fact(opts_.fact_template, f.text, f.source.speaker, f.timestamp) + "\n";
  // User text never turns into special tokens.
  auto t = model_.tokenizer->encode(text, {.add_special = false, .parse_special = false});
  if (tokens_.size() >= opts_.max_cached) tokens_.clear();
  tokens_[f.key] = {f.version, t};
  return t;
}

const FactTexts::Window& FactTexts::window(const Fact& f, int32_t w) {
  drop_stale();
  if (auto it = windows_.find(f.key); it != windows_.end() && it->second.version == f.version && it->second.w == w)
    return it->second;
  Window e{f.version, w, block_opening(f.user), 0};
  for (const Fact& prev : store_.window(f, static_cast<size_t>(w))) {
    const auto t = tokens(prev);
    e.tokens.insert(e.tokens.end(), t.begin(), t.end());
  }
  e.hash = XXH3_64bits(e.tokens.data(), e.tokens.size() * sizeof(int32_t));
  if (windows_.size() >= opts_.max_cached) windows_.clear();
  return windows_[f.key] = std::move(e);
}

std::vector<int32_t> FactTexts::block_opening(const std::string& user) {
  const Tokenizer& tok = *model_.tokenizer;
  const FactsBlock block = FactsBlock::for_user(opts_.header, opts_.footer, user);
  const bool chat = model_.chat_template.family() != ChatFamily::kNone;
  // A chat of one user message, as the requests the facts serve: templates that write the system
  // text into the last user turn (Mistral's) have nowhere to put it in a chat without one.
  const PromptSource one = chat ? PromptSource::of_chat({ChatMessage{"user", "?"}}) : PromptSource::of_text("");
  std::vector<int32_t> out = frame_prompt(one, tok, model_.chat_template, &block, &frames_).before;
  const auto bos = tok.bos_id();
  if (opts_.sink && bos && (out.empty() || out.front() != *bos)) out.insert(out.begin(), *bos);
  return out;
}

void FactTexts::drop_stale() {
  // Loaded before the caller's store reads: a write during them moves the epoch, so what they
  // read is dropped at the next call.
  const uint64_t epoch = store_epoch_.load();
  if (epoch == cache_epoch_) return;
  windows_.clear();
  facts_.clear();
  fact_bytes_ = 0;
  cache_epoch_ = epoch;
}

void FactTexts::make_room_for_facts() {
  if (facts_.size() >= kMaxFactRows || fact_bytes_ >= kMaxFactBytes) {
    facts_.clear();
    fact_bytes_ = 0;
  }
}

void FactTexts::insert_fact(Fact f) {
  auto bytes = [](const Fact& x) { return x.text.size() + x.metadata.size(); };
  fact_bytes_ += bytes(f);
  // An entry of this id (a re-read, or another tenant's fact of the id) is replaced: its bytes go.
  const auto [it, added] = facts_.try_emplace(f.id);
  if (!added) fact_bytes_ -= bytes(it->second);
  it->second = std::move(f);
}

void FactTexts::remember(std::span<const Fact> facts) {
  make_room_for_facts();
  for (const Fact& f : facts) insert_fact(f);
}

std::vector<FactHit> FactTexts::fetch_hits(const std::string& tenant, const std::string& user,
                                           std::span<const ScoredFact> hits) {
  drop_stale();
  make_room_for_facts();  // before the lookups: what they find stays to the end of this call
  auto cached = [&](int64_t id) -> const Fact* {
    const auto it = facts_.find(id);
    return it != facts_.end() && it->second.tenant == tenant && it->second.user == user ? &it->second : nullptr;
  };
  // The store reads only the facts not here (one query).
  std::vector<int64_t> missing;
  for (const ScoredFact& h : hits)
    if (!cached(h.id)) missing.push_back(h.id);
  if (!missing.empty())
    for (Fact& f : store_.get_existing(tenant, user, missing)) insert_fact(std::move(f));
  std::vector<FactHit> out;
  out.reserve(hits.size());
  for (const ScoredFact& h : hits)
    if (const Fact* f = cached(h.id)) out.push_back(FactHit{*f, h.score});
  return out;
}

}  // namespace inferscale
