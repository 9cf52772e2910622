// Composing a request with memory: where the facts go and which tokens are injected.
//
//   [ prefix: BOS, system prompt, memory header ][ f_k ... f_1 ][ suffix: footer, conversation, question ]
//   positions 0 ..                               ^ start        ^ end                         .. n-1
//
// Positions are contiguous from 0. Every fact is rendered and tokenized on its own (no BOS), so its
// tokens are exactly the ones its KV was encoded from. In `inject` mode the facts' range is the
// injected span; in `text` mode the same tokens are prefilled (the paste-as-text baseline), so the
// two modes differ only in how the facts' KV gets into the cache.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {

enum class MemoryMode { kInject, kText, kOff };
enum class MemoryOrder { kRank, kTime };

MemoryMode parse_memory_mode(const std::string& s);    // "inject" | "text" | "off", else kInvalidInput
MemoryOrder parse_memory_order(const std::string& s);  // "rank" | "time"
const char* memory_mode_name(MemoryMode m);

// The native form of a request's memory object.
struct MemoryRequest {
  // The one set of limits on these values, wherever they come from: the API (server/memory_spec.h
  // parses within them), the server's defaults (CLI options) and MemoryService::prepare.
  static constexpr int32_t kMaxK = 256;                // facts retrieved
  static constexpr int32_t kMaxWindow = 128;           // CWE turns each fact is encoded after
  static constexpr int32_t kMaxRecompute = 128;        // first tokens of each fact recomputed
  static constexpr int32_t kMaxRecomputeLast = kMaxK;  // last placed facts recomputed whole

  std::string tenant = kDefaultTenant;
  std::string user;
  std::string name;               // how the memory block names the user; empty: `user`
  int32_t k = -1;                 // -1: MemoryOptions::default_k
  int32_t window = -1;            // -1: MemoryOptions::default_window
  MemoryMode mode = MemoryMode::kInject;
  MemoryOrder order = MemoryOrder::kRank;
  int32_t recompute = -1;         // inject: the first r tokens of each fact are recomputed at serving
                                  // time (EPIC-style) instead of injected; -1: MemoryOptions::default_recompute
  int32_t recompute_last = -1;    // inject: the last m placed facts (nearest the question; the best-ranked
                                  // in rank order) are recomputed whole; -1: MemoryOptions::default_recompute_last
  double recompute_attention = -1;  // inject: this fraction of the injected tokens, those the question
                                    // attends to most in a probe pass (recompute.h), is recomputed;
                                    // in [0, 1]; -1: MemoryOptions::default_recompute_attention
  double neighbours = -1;         // the weight a retrieved turn lends its neighbours (retrieval/
                                  // neighbour_retriever.h), in [0, 1]; -1: the retriever's default
  std::string query;              // retrieval query; empty: the last user message
  std::vector<float> query_vector;  // [dim] client-computed query; when set, retrieval matches it
                                    // against the facts' client vectors and `query` is unused
};

// kInvalidInput naming the field unless each value (defaults resolved) is in [0, its kMax].
void check_memory_limits(int32_t k, int32_t window, int32_t recompute, int32_t recompute_last);

struct ComposedPrompt {
  std::vector<int32_t> tokens;
  int32_t facts_start = 0;   // token range of the facts
  int32_t facts_end = 0;
  std::vector<int32_t> fact_offsets;  // [num_facts + 1] token offset of each placed fact from facts_start
};

// Concatenates prefix, facts (in the order given) and suffix.
ComposedPrompt compose_tokens(const std::vector<int32_t>& prefix, const std::vector<std::vector<int32_t>>& facts,
                              const std::vector<int32_t>& suffix);

// Renders a fact with a template holding {text}, {speaker}, {date} (and {{ / }} for braces).
// Unknown placeholders are a kInvalidInput error naming them.
std::string render_fact(const std::string& tmpl, const std::string& text, const std::string& speaker,
                        const std::string& date);

}  // namespace inferscale
