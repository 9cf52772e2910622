#include "model/tensor_parallel.h"

#include <cstring>

#include "model/architecture.h"
#include "util/check.h"

namespace inferscale {
namespace {

// `t` as the matrix [rows, cols] its role has (kInvalidInput naming `role` unless it holds that
// many values): a view of its storage.
HostTensor as_matrix(const HostTensor& t, int64_t rows, int64_t cols, const char* role) {
  return HostTensor::view(t.dtype, {rows, cols}, expect_weight(t, {rows, cols}, role).data, t.owner);
}

// Rows [first, first + count) of `t` as a matrix [rows, cols]: a view of its storage.
HostTensor row_slice(const HostTensor& t, int64_t rows, int64_t cols, const char* role, int64_t first, int64_t count) {
  const HostTensor m = as_matrix(t, rows, cols, role);
  return HostTensor::view(m.dtype, {count, cols}, m.as<char>() + first * m.row_bytes(), m.owner);
}

// Values [first, first + count) of the vector `t` [n] (a bias): a view, of an f32 copy where `t`
// is block-quantized. An absent bias stays absent, as one rank's load takes it.
HostTensor vector_slice(const HostTensor& t, int64_t n, const char* role, int64_t first, int64_t count) {
  if (t.empty()) return {};
  const HostTensor& v = expect_weight(t, {n}, role);
  const HostTensor f = is_block_quantized(v.dtype) ? v.to_f32() : v;
  return HostTensor::view(f.dtype, {count}, f.as<char>() + first * dtype_size(f.dtype), f.owner);
}

}  // namespace

void check_tensor_parallel(const ModelConfig& cfg, int32_t tp) {
  IS_REQUIRE(tp >= 1, kInvalidInput, "the tensor-parallel size must be at least 1, got {}", tp);
  IS_REQUIRE(!cfg.is_encoder(), kUnsupported, "tensor parallelism splits decoders only, not an encoder");
  IS_REQUIRE(cfg.num_heads % tp == 0 && cfg.num_kv_heads % tp == 0 && cfg.intermediate_size % tp == 0, kInvalidInput,
             "a tensor-parallel size of {} does not split this model: its {} query heads, {} kv heads and intermediate "
             "size {} must each be a multiple of it",
             tp, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size);
}

ModelConfig shard_config(const ModelConfig& cfg, int32_t tp) {
  check_tensor_parallel(cfg, tp);
  ModelConfig c = cfg;
  c.num_heads /= tp;
  c.num_kv_heads /= tp;
  c.intermediate_size /= tp;
  return c;
}

HostTensor column_slice(const HostTensor& t, int64_t first, int64_t count) {
  IS_CHECK(t.shape.size() == 2 && first >= 0 && count > 0 && first + count <= t.dim(1), "columns [{}, {}) of a tensor {}",
           first, first + count, t.shape_str());
  const int64_t rows = t.dim(0), block = dtype_block(t.dtype).elems;
  if (first % block == 0 && count % block == 0) {
    // Whole blocks (every element of a scalar type is one): each row's bytes [first, first + count).
    const size_t per_block = static_cast<size_t>(dtype_block(t.dtype).bytes);
    const size_t src_row = t.row_bytes(), offset = static_cast<size_t>(first / block) * per_block;
    HostTensor out = HostTensor::uninitialized(t.dtype, {rows, count});
    const size_t dst_row = out.row_bytes();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.as<char>() + r * dst_row, t.as<const char>() + r * src_row + offset, dst_row);
    return out;
  }
  // A cut inside a block: the rows in f32.
  const HostTensor f = t.to_f32();
  HostTensor out = HostTensor::uninitialized(DType::kF32, {rows, count});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.as<float>() + r * count, f.as<const float>() + r * t.dim(1) + first, count * sizeof(float));
  return out;
}

ModelWeights shard_weights(const ModelWeights& w, const ModelConfig& cfg, TensorShard s) {
  check_tensor_parallel(cfg, s.size);
  IS_CHECK(s.rank >= 0 && s.rank < s.size, "rank {} of {}", s.rank, s.size);
  const int64_t H = cfg.hidden_size, QS = cfg.q_size(), KS = cfg.kv_size(), I = cfg.intermediate_size;
  const int64_t qs = QS / s.size, ks = KS / s.size, is = I / s.size;
  ModelWeights out;
  out.embed = w.embed;
  out.final_norm = w.final_norm;
  out.lm_head = w.lm_head;
  for (const LayerWeights& l : w.layers) {
    LayerWeights r;
    r.attn_norm = l.attn_norm;
    r.ffn_norm = l.ffn_norm;
    r.q_norm = l.q_norm;
    r.k_norm = l.k_norm;
    r.wq = row_slice(l.wq, QS, H, "wq", s.rank * qs, qs);
    r.wk = row_slice(l.wk, KS, H, "wk", s.rank * ks, ks);
    r.wv = row_slice(l.wv, KS, H, "wv", s.rank * ks, ks);
    if (cfg.attention_bias) {
      r.bq = vector_slice(l.bq, QS, "bq", s.rank * qs, qs);
      r.bk = vector_slice(l.bk, KS, "bk", s.rank * ks, ks);
      r.bv = vector_slice(l.bv, KS, "bv", s.rank * ks, ks);
    }
    r.w_gate = row_slice(l.w_gate, I, H, "w_gate", s.rank * is, is);
    r.w_up = row_slice(l.w_up, I, H, "w_up", s.rank * is, is);
    r.wo = column_slice(as_matrix(l.wo, H, QS, "wo"), s.rank * qs, qs);
    r.w_down = column_slice(as_matrix(l.w_down, H, I, "w_down"), s.rank * is, is);
    out.layers.push_back(std::move(r));
  }
  return out;
}

}  // namespace inferscale
