// Where a probe of a forward batch (ForwardBatch::Probe) reads its rows and entries, for both
// backends' attention ops.
#pragma once
#include <cmath>

#include "backend/attention_mass_shape.h"
#include "model/config.h"
#include "model/forward_batch.h"

namespace inferscale {

inline AttentionMassShape probe_mass_shape(const ForwardBatch& b, const ForwardBatch::Probe& p, const ModelConfig& cfg,
                                           int32_t block_size) {
  AttentionMassShape s;
  s.kv_start = b.kv_start.empty() ? 0 : b.kv_start[static_cast<size_t>(p.seq)];
  s.rows = p.rows(b);
  s.num_heads = static_cast<int32_t>(cfg.num_heads);
  s.num_kv_heads = static_cast<int32_t>(cfg.num_kv_heads);
  s.head_dim = static_cast<int32_t>(cfg.head_dim);
  s.block_size = block_size;
  s.key_begin = p.key_begin;
  s.key_end = p.key_end;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg.head_dim)));
  return s;
}

}  // namespace inferscale
