#include "engine/packed_prefill.h"

#include <algorithm>

#include "engine/batch_builder.h"
#include "util/check.h"

namespace inferscale {
namespace {

struct Active {
  int32_t seq;
  int32_t len;
  int32_t done = 0;             // tokens already forwarded
  std::vector<int32_t> blocks;  // block table: position p lives in blocks[p / bs] at offset p % bs
};

}  // namespace

int64_t packed_prefill(Backend& backend, BlockManager& blocks, int32_t max_batch_tokens,
                       std::span<const std::vector<int32_t>> seqs, const PackedPrefillHooks& hooks) {
  IS_REQUIRE(max_batch_tokens > 0, kInvalidInput, "max_batch_tokens must be positive, got {}", max_batch_tokens);
  for (size_t s = 0; s < seqs.size(); ++s) {
    IS_REQUIRE(!seqs[s].empty(), kInvalidInput, "cannot {}: sequence {} is empty", hooks.purpose, s);
    IS_REQUIRE(!hooks.whole_sequences || seqs[s].size() <= static_cast<size_t>(max_batch_tokens), kInvalidInput,
               "cannot {}: sequence {} of {} tokens does not fit one forward of {} tokens", hooks.purpose, s,
               seqs[s].size(), max_batch_tokens);
  }
  const int32_t bs = blocks.block_size();
  int64_t forwarded = 0;
  std::vector<Active> active;
  size_t next = 0;
  auto release = [&](Active& a) {
    for (int32_t b : a.blocks) blocks.release(b);
    a.blocks.clear();
  };
  std::vector<PackedToken> rows;  // the token behind each output row of one forward
  std::vector<float> out;
  try {
    while (next < seqs.size() || !active.empty()) {
      // Admit whole sequences while the budget and the free blocks allow (at least one per forward).
      int32_t planned = 0;
      for (const Active& a : active) planned += a.len - a.done;
      while (next < seqs.size() && (active.empty() || planned < max_batch_tokens)) {
        const auto len = static_cast<int32_t>(seqs[next].size());
        if (hooks.whole_sequences && !active.empty() && planned + len > max_batch_tokens) break;
        const int64_t need = (len + bs - 1) / bs;
        if (!blocks.can_allocate(need)) {
          IS_REQUIRE(!active.empty(), kResource, "KV cache too full to {} ({} blocks needed, {} free); retry when requests finish",
                     hooks.purpose, need, blocks.num_free());
          break;
        }
        Active a{static_cast<int32_t>(next), len, 0, {}};
        for (int64_t b = 0; b < need; ++b) a.blocks.push_back(blocks.allocate());
        active.push_back(std::move(a));
        planned += len;
        ++next;
      }
      // One forward over the next chunk of each active sequence, within the budget.
      BatchBuilder bb(bs);
      rows.clear();
      int32_t budget = max_batch_tokens;
      std::vector<std::pair<size_t, int32_t>> took;  // (active index, tokens)
      for (size_t ai = 0; ai < active.size() && budget > 0; ++ai) {
        Active& a = active[ai];
        const int32_t n = std::min(budget, a.len - a.done);
        const std::vector<int32_t>& tokens = seqs[static_cast<size_t>(a.seq)];
        for (int32_t p = a.done; p < a.done + n; ++p) {
          const PackedToken t{a.seq, p};
          const bool output = hooks.wants_output && hooks.wants_output(t);
          if (output) rows.push_back(t);
          bb.add_token(tokens[static_cast<size_t>(p)], p, a.blocks, hooks.capture_slot ? hooks.capture_slot(t) : -1, output);
        }
        bb.end_sequence(a.blocks);
        took.emplace_back(ai, n);
        budget -= n;
      }
      ForwardBatch& fb = bb.batch();
      fb.output = hooks.output;
      backend.forward(fb, out);
      forwarded += fb.num_tokens();
      if (!rows.empty()) {
        IS_CHECK(hooks.on_output != nullptr, "output rows without an on_output hook");
        IS_CHECK(out.size() % rows.size() == 0, "forward returned {} floats for {} rows", out.size(), rows.size());
        hooks.on_output(rows, out);
      }
      for (auto [ai, n] : took) active[ai].done += n;
      for (Active& a : active)
        if (a.done == a.len) release(a);
      std::erase_if(active, [](const Active& a) { return a.done == a.len; });
    }
  } catch (...) {
    for (Active& a : active) release(a);
    throw;
  }
  return forwarded;
}

}  // namespace inferscale
