#include "backend/cuda/device_weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "util/check.h"

namespace inferscale {
namespace {

using bf16 = __nv_bfloat16;

// Byte offsets of every tensor inside the arena, 256-byte aligned.
struct Layout {
  struct LayerOff {
    size_t wqkv, wo, wgu, wdown, attn_norm, ffn_norm, bqkv, q_norm, k_norm;
  };
  size_t embed = 0, lm_head = 0, final_norm = 0, total = 0;
  std::vector<LayerOff> layers;

  size_t take(size_t bytes) {
    const size_t off = total;
    total += (bytes + 255) / 256 * 256;
    return off;
  }
  Layout(const ModelConfig& c, bool tied) {
    const size_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
    const size_t QKV = (c.num_heads + 2 * c.num_kv_heads) * D, QS = c.q_size();
    embed = take(V * H * 2);
    lm_head = tied ? embed : take(V * H * 2);
    final_norm = take(H * 4);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      LayerOff o{};
      o.wqkv = take(QKV * H * 2);
      o.wo = take(H * QS * 2);
      o.wgu = take(2 * I * H * 2);
      o.wdown = take(H * I * 2);
      o.attn_norm = take(H * 4);
      o.ffn_norm = take(H * 4);
      o.bqkv = c.attention_bias ? take(QKV * 4) : SIZE_MAX;
      o.q_norm = c.qk_norm ? take(D * 4) : SIZE_MAX;
      o.k_norm = c.qk_norm ? take(D * 4) : SIZE_MAX;
      layers.push_back(o);
    }
  }
};

template <class T>
const T* at(const DeviceBuffer& b, size_t off) {
  return off == SIZE_MAX ? nullptr : reinterpret_cast<const T*>(static_cast<const char*>(b.data()) + off);
}

void bind(DeviceWeights& dw, const DeviceBuffer& arena, const Layout& lay) {
  dw.embed = at<bf16>(arena, lay.embed);
  dw.lm_head = at<bf16>(arena, lay.lm_head);
  dw.final_norm = at<float>(arena, lay.final_norm);
  dw.layers.clear();
  for (const auto& o : lay.layers) {
    dw.layers.push_back(DeviceLayer{at<bf16>(arena, o.wqkv), at<bf16>(arena, o.wo), at<bf16>(arena, o.wgu),
                                    at<bf16>(arena, o.wdown), at<float>(arena, o.attn_norm),
                                    at<float>(arena, o.ffn_norm), at<float>(arena, o.bqkv),
                                    at<float>(arena, o.q_norm), at<float>(arena, o.k_norm)});
  }
}

// Host staging: tensors converted to bf16 / f32 then copied to their arena offsets. Matrices go in
// chunks of whole rows (about 4M values: 16 MiB of f32, 8 MiB of bf16), so converting a large
// f16 or block-quantized tensor never holds a full-size f32 or bf16 copy of it.
class Uploader {
 public:
  explicit Uploader(DeviceBuffer& arena) : arena_(arena) {}
  // Appends `t` (expected numel) as bf16 at byte offset `off` + `elem_offset` elements.
  void matrix(const HostTensor& t, int64_t numel, size_t off, int64_t elem_offset = 0) {
    IS_REQUIRE(!t.empty() && t.numel() == numel, kInvalidInput, "weight has shape {}, expected {} elements",
               t.shape_str(), numel);
    const int64_t row = t.row_size(), rows = t.num_rows();
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkValues / std::max<int64_t>(1, row));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0), n = nr * row;
      const size_t dst = off + static_cast<size_t>(elem_offset + r0 * row) * 2;
      if (t.dtype == DType::kBF16) {
        copy(t.as<const uint16_t>() + r0 * row, static_cast<size_t>(n) * 2, dst);
        continue;
      }
      f32_.resize(static_cast<size_t>(n));
      bf16_.resize(static_cast<size_t>(n));
      t.rows_to_f32(r0, nr, f32_.data());
      const float* f = f32_.data();
      uint16_t* h = bf16_.data();
#pragma omp parallel for schedule(static) if (n >= kChunkValues / 2)  // big chunks only, as convert_to_f32
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
      copy(bf16_.data(), static_cast<size_t>(n) * 2, dst);
    }
  }
  void vector(const HostTensor& t, int64_t numel, size_t off, int64_t elem_offset = 0) {
    IS_REQUIRE(!t.empty() && t.numel() == numel, kInvalidInput, "weight has shape {}, expected {} elements",
               t.shape_str(), numel);
    const HostTensor f = t.to_f32();
    copy(f.data, static_cast<size_t>(numel) * 4, off + static_cast<size_t>(elem_offset) * 4);
  }

 private:
  void copy(const void* src, size_t bytes, size_t off) {
    CUDA_CHECK(cudaMemcpy(static_cast<char*>(arena_.data()) + off, src, bytes, cudaMemcpyHostToDevice));
  }
  static constexpr int64_t kChunkValues = int64_t{1} << 22;
  DeviceBuffer& arena_;
  std::vector<float> f32_;      // one chunk's values as f32
  std::vector<uint16_t> bf16_;  // ... and as bf16
};

}  // namespace

DeviceWeights DeviceWeights::upload(const ModelConfig& c, const ModelWeights& w) {
  // No head and not tied: an embedding backbone (hidden states only); the layout then aliases the
  // embedding, but lm_head stays null so asking for logits is refused, not silently tied.
  const bool headless = w.lm_head.empty() && !c.tie_word_embeddings;
  const bool tied = w.lm_head.empty() || w.lm_head.data == w.embed.data;
  const Layout lay(c, tied);
  IS_REQUIRE(static_cast<int64_t>(w.layers.size()) == c.num_layers, kInvalidInput, "weights have {} layers, config {}",
             w.layers.size(), c.num_layers);
  DeviceWeights dw;
  dw.arena_.resize(lay.total);
  Uploader up(dw.arena_);
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t QS = c.q_size(), KS = c.kv_size();
  up.matrix(w.embed, V * H, lay.embed);
  if (!tied) up.matrix(w.lm_head, V * H, lay.lm_head);
  up.vector(w.final_norm, H, lay.final_norm);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const auto& o = lay.layers[static_cast<size_t>(l)];
    up.matrix(L.wq, QS * H, o.wqkv);
    up.matrix(L.wk, KS * H, o.wqkv, QS * H);
    up.matrix(L.wv, KS * H, o.wqkv, (QS + KS) * H);
    up.matrix(L.wo, H * QS, o.wo);
    up.matrix(L.w_gate, I * H, o.wgu);
    up.matrix(L.w_up, I * H, o.wgu, I * H);
    up.matrix(L.w_down, H * I, o.wdown);
    up.vector(L.attn_norm, H, o.attn_norm);
    up.vector(L.ffn_norm, H, o.ffn_norm);
    if (c.attention_bias) {
      up.vector(L.bq, QS, o.bqkv);
      up.vector(L.bk, KS, o.bqkv, QS);
      up.vector(L.bv, KS, o.bqkv, QS + KS);
    }
    if (c.qk_norm) {
      up.vector(L.q_norm, D, o.q_norm);
      up.vector(L.k_norm, D, o.k_norm);
    }
  }
  bind(dw, dw.arena_, lay);
  if (headless) dw.lm_head = nullptr;
  return dw;
}

DeviceWeights DeviceWeights::random(const ModelConfig& c, uint64_t seed) {
  const Layout lay(c, c.tie_word_embeddings);
  DeviceWeights dw;
  dw.arena_.resize(lay.total);
  bind(dw, dw.arena_, lay);
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t QKV = (c.num_heads + 2 * c.num_kv_heads) * D, QS = c.q_size();
  cudaStream_t s = nullptr;  // legacy default stream; synchronised below
  uint64_t k = seed * 1000003ull;
  auto mat = [&](const bf16* p, int64_t n) { cuda::fill_random_bf16(const_cast<bf16*>(p), n, ++k, 0.0f, 0.02f, s); };
  auto vec = [&](const float* p, int64_t n, float v) {
    if (p != nullptr) cuda::fill_f32(const_cast<float*>(p), n, v, s);
  };
  mat(dw.embed, V * H);
  if (dw.lm_head != dw.embed) mat(dw.lm_head, V * H);
  vec(dw.final_norm, H, 1.0f);
  for (const DeviceLayer& L : dw.layers) {
    mat(L.wqkv, QKV * H);
    mat(L.wo, H * QS);
    mat(L.w_gate_up, 2 * I * H);
    mat(L.w_down, H * I);
    vec(L.attn_norm, H, 1.0f);
    vec(L.ffn_norm, H, 1.0f);
    vec(L.bqkv, QKV, 0.0f);
    vec(L.q_norm, D, 1.0f);
    vec(L.k_norm, D, 1.0f);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return dw;
}

}  // namespace inferscale
