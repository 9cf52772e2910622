// Which injected tokens a request computes at serving time instead of injecting them
// (InjectedSpan::recompute: 1 = computed, attending to the request's whole context before it).
// A request combines three selectors:
//
//   first r     each fact's first r tokens (EPIC: what an isolated encoding gets most wrong is its
//               attention sink)                                                memory.recompute
//   last m      the last m placed facts whole (the nearest the question; in rank order the
//               best-ranked)                                                   memory.recompute_last
//   attention   a fraction of the span's tokens: those the question attends to most. A probe
//               pass computes the prompt once with every fact injected (ProbeSeq) and sums, over
//               the upper half of the layers (probe_first_layer) and every head, the attention
//               weight each injected token receives from the prompt's last token, the one whose
//               logits give the answer's first token (ProphetKV, arXiv 2602.02579: the query's own
//               attention is the cheapest estimate of which cached tokens its answer depends on).
//               Probing that row alone beat probing every row after the span (footer,
//               conversation, question), and the upper half of the layers beat all of them:
//               docs/QUALITY.md                                                memory.recompute_attention
//
//   span:    [ f_3 ........ ][ f_2 ...... ][ f_1 ......... ]      fact_offsets = {0, 14, 25, 39}
//   r = 1:    1 0 0 ...        1 0 ...       1 0 0 ...
//   m = 1:                                   1 1 1 ... 1
//   attention (2 tokens): the two largest probe weights among the tokens not chosen above
#pragma once
#include <cstdint>
#include <vector>

namespace inferscale {

// The first-r and last-m selectors over facts placed at `fact_offsets` ([facts + 1], from the
// span's start); all zeros when both are 0.
std::vector<uint8_t> fact_recompute_mask(const std::vector<int32_t>& fact_offsets, int32_t first, int32_t last);

// The first layer whose attention weights the probe sums: the upper half of the model's layers
// (layers [num_layers / 2, num_layers)). The lower layers spread their weight over the span by
// position and token identity more than by what the question asks (on all of LoCoMo, SmolLM2,
// 15% recomputed: KL cut 48% / 63% at k = 20 / 50 with the upper half, 43% / 58% with every layer).
inline int32_t probe_first_layer(int64_t num_layers) { return static_cast<int32_t>(num_layers / 2); }

// The attention selector: floor(fraction * span tokens) more tokens chosen, those with the largest
// `mass` ([span tokens], the probe's) among the ones `mask` does not choose yet; on equal mass the
// earlier token. Returns how many it chose.
int32_t add_attention_choice(std::vector<uint8_t>& mask, const std::vector<float>& mass, double fraction);

}  // namespace inferscale
