// Prefix-cache hash of one full block, chained from its parent's hash. `extra` separates blocks
// whose tokens match but whose KV differs: injected memory (user, fact ids, versions, KV
// fingerprint), so an ordinary prompt never matches a block holding injected KV.
#pragma once
#include <xxhash.h>

#include <cstdint>
#include <span>

namespace inferscale {

inline uint64_t prefix_block_hash(uint64_t parent, uint64_t extra, std::span<const int32_t> tokens) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &parent, sizeof parent);
  XXH3_64bits_update(st, &extra, sizeof extra);
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace inferscale
