// Prefix-cache hash of one full block, chained from its parent's hash. `extra` separates blocks
// whose tokens match but must not be shared: injected memory (user, fact ids, versions, KV
// fingerprint), so an ordinary prompt never matches a block holding injected KV, and the request's
// cache salt (its tenant, as vLLM's cache_salt), so two tenants never share a block.
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

// The span key of a request that reads its injected facts in place: never equal to the copying
// requests' key for the same span (their blocks at the span's edges differ).
inline uint64_t in_place_span_key(uint64_t span_key) {
  const uint64_t both[2] = {span_key, 0x696e2d706c616365ull};  // "in-place"
  return XXH3_64bits(both, sizeof both) | 1;
}

// The `extra` of a block: the request's cache salt (0: none) joined with the injected span's key
// (0: the block holds no injected KV and follows none). Both 0 gives 0, the unsalted hash.
inline uint64_t prefix_block_extra(uint64_t salt, uint64_t injected_key) {
  if (salt == 0) return injected_key;
  const uint64_t both[2] = {salt, injected_key};
  return XXH3_64bits(both, sizeof both) | 1;  // never 0: 0 is the unsalted, uninjected key
}

}  // namespace inferscale
