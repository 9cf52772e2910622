#include "memory/fact_encoder.h"

#include <algorithm>

#include "util/check.h"

namespace inferscale {
namespace {

struct Active {
  const EncodeJob* job;
  int32_t len;        // window + fact
  int32_t done = 0;   // tokens already forwarded
  std::vector<int32_t> blocks;
  int32_t token(int32_t i) const {
    const int32_t w = static_cast<int32_t>(job->window.size());
    return i < w ? job->window[static_cast<size_t>(i)] : job->fact[static_cast<size_t>(i - w)];
  }
};

}  // namespace

void FactEncoder::encode(std::span<const EncodeJob> jobs) {
  const int32_t bs = blocks_.block_size();
  for (const EncodeJob& j : jobs) {
    IS_REQUIRE(!j.fact.empty(), kInvalidInput, "cannot encode an empty fact");
    IS_CHECK(j.pool_slots.size() == j.fact.size(), "fact of {} tokens with {} pool slots", j.fact.size(), j.pool_slots.size());
  }
  std::vector<Active> active;
  size_t next = 0;
  auto release = [&](Active& a) {
    for (int32_t b : a.blocks) blocks_.release(b);
    a.blocks.clear();
  };
  try {
    while (next < jobs.size() || !active.empty()) {
      // Admit whole jobs while the budget and the free blocks allow (at least one per forward).
      int32_t planned = 0;
      for (const Active& a : active) planned += a.len - a.done;
      while (next < jobs.size() && (active.empty() || planned < max_batch_tokens_)) {
        const EncodeJob& j = jobs[next];
        const int32_t len = static_cast<int32_t>(j.window.size() + j.fact.size());
        const int64_t need = (len + bs - 1) / bs;
        if (!blocks_.can_allocate(need)) {
          IS_REQUIRE(!active.empty(), kResource,
                     "KV cache too full to encode a memory fact ({} blocks needed, {} free); retry when requests finish",
                     need, blocks_.num_free());
          break;
        }
        Active a{&j, len, 0, {}};
        for (int64_t b = 0; b < need; ++b) a.blocks.push_back(blocks_.allocate());
        active.push_back(std::move(a));
        planned += len;
        ++next;
      }
      // One forward over the next chunk of each active sequence.
      ForwardBatch fb;
      fb.q_indptr.push_back(0);
      fb.kv_indptr.push_back(0);
      int32_t budget = max_batch_tokens_;
      std::vector<std::pair<size_t, int32_t>> took;  // (active index, tokens)
      for (size_t ai = 0; ai < active.size() && budget > 0; ++ai) {
        Active& a = active[ai];
        const int32_t n = std::min(budget, a.len - a.done);
        const int32_t w = static_cast<int32_t>(a.job->window.size());
        for (int32_t i = a.done; i < a.done + n; ++i) {
          if (i >= w) {
            fb.capture_tokens.push_back(static_cast<int32_t>(fb.token_ids.size()));
            fb.capture_slots.push_back(a.job->pool_slots[static_cast<size_t>(i - w)]);
          }
          fb.token_ids.push_back(a.token(i));
          fb.positions.push_back(i);
          fb.slot_mapping.push_back(static_cast<int64_t>(a.blocks[static_cast<size_t>(i / bs)]) * bs + i % bs);
        }
        fb.q_indptr.push_back(static_cast<int32_t>(fb.token_ids.size()));
        fb.kv_indices.insert(fb.kv_indices.end(), a.blocks.begin(), a.blocks.end());
        fb.kv_indptr.push_back(static_cast<int32_t>(fb.kv_indices.size()));
        took.emplace_back(ai, n);
        budget -= n;
      }
      std::vector<float> unused;
      backend_.forward(fb, unused);
      tokens_processed_ += fb.num_tokens();
      for (auto [ai, n] : took) active[ai].done += n;
      for (Active& a : active)
        if (a.done == a.len) release(a);
      active.erase(std::remove_if(active.begin(), active.end(), [](const Active& a) { return a.done == a.len; }),
                   active.end());
    }
  } catch (...) {
    for (Active& a : active) release(a);
    throw;
  }
}

}  // namespace inferscale
