#include "memory/kv/fact_encoder.h"

#include "engine/packed_prefill.h"
#include "util/check.h"

namespace inferscale {

std::vector<int32_t> EncodeJob::sequence() const {
  IS_REQUIRE(!fact.empty(), kInvalidInput, "cannot encode an empty fact");
  IS_CHECK(pool_slots.size() == fact.size(), "fact of {} tokens with {} pool slots", fact.size(), pool_slots.size());
  std::vector<int32_t> s = window;
  s.insert(s.end(), fact.begin(), fact.end());
  return s;
}

std::vector<int64_t> EncodeJob::capture_slots() const {
  // Only the fact's tokens are kept: position p >= w is fact token p - w.
  std::vector<int64_t> s(window.size(), -1);
  s.insert(s.end(), pool_slots.begin(), pool_slots.end());
  return s;
}

void FactEncoder::encode(std::span<const EncodeJob> jobs) {
  std::vector<std::vector<int32_t>> seqs;  // [window][fact] per job
  std::vector<std::vector<int64_t>> slots;
  seqs.reserve(jobs.size());
  for (const EncodeJob& j : jobs) {
    seqs.push_back(j.sequence());
    slots.push_back(j.capture_slots());
  }
  PackedPrefillHooks hooks;
  hooks.purpose = "encode a memory fact";
  hooks.capture_slot = [&](PackedToken t) -> int64_t {
    return slots[static_cast<size_t>(t.seq)][static_cast<size_t>(t.pos)];
  };
  tokens_processed_ += packed_prefill(backend_, blocks_, max_batch_tokens_, seqs, hooks);
}

}  // namespace inferscale
