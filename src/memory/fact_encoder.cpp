#include "memory/fact_encoder.h"

#include "engine/packed_prefill.h"
#include "util/check.h"

namespace inferscale {

void FactEncoder::encode(std::span<const EncodeJob> jobs) {
  std::vector<std::vector<int32_t>> seqs;  // [window][fact] per job
  seqs.reserve(jobs.size());
  for (const EncodeJob& j : jobs) {
    IS_REQUIRE(!j.fact.empty(), kInvalidInput, "cannot encode an empty fact");
    IS_CHECK(j.pool_slots.size() == j.fact.size(), "fact of {} tokens with {} pool slots", j.fact.size(), j.pool_slots.size());
    std::vector<int32_t> s = j.window;
    s.insert(s.end(), j.fact.begin(), j.fact.end());
    seqs.push_back(std::move(s));
  }
  PackedPrefillHooks hooks;
  hooks.purpose = "encode a memory fact";
  // Only the fact's tokens are kept: position p >= w is fact token p - w.
  hooks.capture_slot = [&](PackedToken t) -> int64_t {
    const EncodeJob& j = jobs[static_cast<size_t>(t.seq)];
    const auto w = static_cast<int32_t>(j.window.size());
    return t.pos < w ? -1 : j.pool_slots[static_cast<size_t>(t.pos - w)];
  };
  tokens_processed_ += packed_prefill(backend_, blocks_, max_batch_tokens_, seqs, hooks);
}

}  // namespace inferscale
