// The CPU reference backend: fp32 weights and activations, OpenBLAS GEMMs, OpenMP elsewhere.
// Layer by layer, naming every intermediate as llama.cpp does, so it can be compared with HF.
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_twins.h"
#include "model/rope.h"
#include "model/weights.h"
#include "util/check.h"

namespace inferscale {
namespace {

// f32 copies (or views, when stored as f32) of every weight.
struct F32Layer {
  HostTensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
};

const float* ptr(const HostTensor& t) { return t.empty() ? nullptr : t.as<const float>(); }
HostTensor f32(const HostTensor& t) { return t.empty() ? HostTensor{} : t.to_f32(); }

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& cfg, const ModelWeights& w, const BackendOptions& opts)
      : cfg_(cfg), rope_(cfg), block_size_(opts.block_size), threads_(opts.num_threads) {
    IS_REQUIRE(block_size_ > 0, kInvalidInput, "block size must be positive, got {}", block_size_);
    if (opts.num_threads > 0) openblas_set_num_threads(opts.num_threads);
    embed_ = f32(w.embed);
    final_norm_ = f32(w.final_norm);
    lm_head_ = (w.lm_head.data == w.embed.data) ? embed_ : f32(w.lm_head);
    for (const LayerWeights& l : w.layers) {
      layers_.push_back(F32Layer{f32(l.attn_norm), f32(l.wq), f32(l.wk), f32(l.wv), f32(l.wo), f32(l.bq), f32(l.bk),
                                 f32(l.bv), f32(l.q_norm), f32(l.k_norm), f32(l.ffn_norm), f32(l.w_gate),
                                 f32(l.w_up), f32(l.w_down)});
    }
    IS_CHECK(static_cast<int64_t>(layers_.size()) == cfg_.num_layers, "weights have {} layers, config {}",
             layers_.size(), cfg_.num_layers);
    const int64_t bytes_per_block = cfg_.kv_bytes_per_token(4) * block_size_;
    num_blocks_ = opts.num_cache_blocks > 0 ? opts.num_cache_blocks : std::max<int64_t>(1, opts.cache_memory_bytes / bytes_per_block);
    num_pool_blocks_ = opts.num_pool_blocks;
    const int64_t row = cfg_.kv_size();
    const size_t cache_elems = static_cast<size_t>(num_blocks_ * block_size_ * row);
    const size_t pool_elems = static_cast<size_t>(num_pool_blocks_ * block_size_ * row);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      k_cache_.push_back(HostTensor::zeros(DType::kF32, {static_cast<int64_t>(cache_elems)}));
      v_cache_.push_back(HostTensor::zeros(DType::kF32, {static_cast<int64_t>(cache_elems)}));
      if (pool_elems > 0) {
        k_pool_.push_back(HostTensor::zeros(DType::kF32, {static_cast<int64_t>(pool_elems)}));
        v_pool_.push_back(HostTensor::zeros(DType::kF32, {static_cast<int64_t>(pool_elems)}));
      }
    }
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return block_size_; }
  int64_t num_cache_blocks() const override { return num_blocks_; }
  int64_t num_pool_blocks() const override { return num_pool_blocks_; }
  DType pool_dtype() const override { return DType::kF32; }

  void forward(const ForwardBatch& b, std::vector<float>& out) override {
    b.validate(num_blocks_ * block_size_, block_size_);
    for (int64_t s : b.capture_slots) IS_CHECK(s >= 0 && s < num_pool_blocks_ * block_size_, "pool slot {} out of range", s);
    IS_REQUIRE(b.output == ForwardBatch::Output::kHidden || b.output_tokens.empty() || !lm_head_.empty(), kUnsupported,
               "this model has no LM head (an embedding backbone): it yields hidden states, not logits");
    const int64_t T = b.num_tokens();
    const int64_t H = cfg_.hidden_size, D = cfg_.head_dim, NH = cfg_.num_heads, NKV = cfg_.num_kv_heads;
    const int64_t QS = cfg_.q_size(), KS = cfg_.kv_size(), I = cfg_.intermediate_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);

    // Activations live in buffers kept across forwards: every element is written before it is read.
    Workspace& w = ws_;
    auto& x = w.x;        // [T, H] residual stream
    auto& h = w.h;        // [T, H] normed
    auto& q = w.q;        // [T, NH, D]
    auto& k = w.k;        // [T, NKV, D]
    auto& v = w.v;        // [T, NKV, D]
    auto& attn = w.attn;  // [T, NH, D]
    auto& gate = w.gate;  // [T, I]
    auto& up = w.up;      // [T, I]
    auto& cosv = w.cos;   // [T, D / 2]
    auto& sinv = w.sin;   // [T, D / 2]
    x.resize(static_cast<size_t>(T * H));
    h.resize(x.size());
    q.resize(static_cast<size_t>(T * QS));
    k.resize(static_cast<size_t>(T * KS));
    v.resize(k.size());
    attn.resize(q.size());
    gate.resize(static_cast<size_t>(T * I));
    up.resize(gate.size());
    cosv.resize(static_cast<size_t>(T * D / 2));
    sinv.resize(cosv.size());

    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = b.token_ids[static_cast<size_t>(t)];
      IS_REQUIRE(id >= 0 && id < cfg_.vocab_size, kInvalidInput, "token id {} outside the vocabulary of {}", id, cfg_.vocab_size);
      std::memcpy(&x[static_cast<size_t>(t * H)], embed_.as<float>() + static_cast<int64_t>(id) * H, static_cast<size_t>(H) * 4);
      rope_.angles(b.positions[static_cast<size_t>(t)], &cosv[static_cast<size_t>(t * D / 2)], &sinv[static_cast<size_t>(t * D / 2)]);
    }

    cpu::PagedAttentionArgs pa{q.data(), nullptr, nullptr, attn.data(), b.positions.data(), b.q_indptr.data(),
                               b.kv_indptr.data(), b.kv_indices.data(), b.kv_start.empty() ? nullptr : b.kv_start.data(), b.num_seqs(), static_cast<int32_t>(NH),
                               static_cast<int32_t>(NKV), static_cast<int32_t>(D), block_size_,
                               static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
    std::vector<float> cap(b.capture_tokens.size() * static_cast<size_t>(KS));
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const F32Layer& L = layers_[static_cast<size_t>(l)];
      // attn_norm -> q, k, v projections (+ bias) -> per-head q/k norm
      cpu::rmsnorm(x.data(), ptr(L.attn_norm), h.data(), T, H, eps, &threads_);
      cpu::linear(h.data(), ptr(L.wq), ptr(L.bq), q.data(), T, H, QS);
      cpu::linear(h.data(), ptr(L.wk), ptr(L.bk), k.data(), T, H, KS);
      cpu::linear(h.data(), ptr(L.wv), ptr(L.bv), v.data(), T, H, KS);
      if (cfg_.qk_norm) {
        cpu::rmsnorm(q.data(), ptr(L.q_norm), q.data(), T * NH, D, eps, &threads_);
        cpu::rmsnorm(k.data(), ptr(L.k_norm), k.data(), T * NKV, D, eps, &threads_);
      }
      // Write path: keys BEFORE rotation, values as they are.
      if (!b.capture_tokens.empty()) {
        const auto* ct = b.capture_tokens.data();
        for (size_t c = 0; c < b.capture_tokens.size(); ++c)
          std::memcpy(&cap[c * static_cast<size_t>(KS)], &k[static_cast<size_t>(ct[c] * KS)], static_cast<size_t>(KS) * 4);
        cpu::scatter_rows(cap.data(), b.capture_slots.data(), k_pool_[static_cast<size_t>(l)].as<float>(),
                          static_cast<int64_t>(cap.size()) / KS, KS);
        for (size_t c = 0; c < b.capture_tokens.size(); ++c)
          std::memcpy(&cap[c * static_cast<size_t>(KS)], &v[static_cast<size_t>(ct[c] * KS)], static_cast<size_t>(KS) * 4);
        cpu::scatter_rows(cap.data(), b.capture_slots.data(), v_pool_[static_cast<size_t>(l)].as<float>(),
                          static_cast<int64_t>(cap.size()) / KS, KS);
      }
      for (int64_t t = 0; t < T; ++t) {
        rope_.rotate_with(&q[static_cast<size_t>(t * QS)], NH, &cosv[static_cast<size_t>(t * D / 2)], &sinv[static_cast<size_t>(t * D / 2)]);
        rope_.rotate_with(&k[static_cast<size_t>(t * KS)], NKV, &cosv[static_cast<size_t>(t * D / 2)], &sinv[static_cast<size_t>(t * D / 2)]);
      }
      float* kc = k_cache_[static_cast<size_t>(l)].as<float>();
      float* vc = v_cache_[static_cast<size_t>(l)].as<float>();
      cpu::scatter_rows(k.data(), b.slot_mapping.data(), kc, T, KS);
      cpu::scatter_rows(v.data(), b.slot_mapping.data(), vc, T, KS);
      pa.k_cache = kc;
      pa.v_cache = vc;
      cpu::paged_attention(pa, &threads_);
      // o_proj, residual
      cpu::linear(attn.data(), ptr(L.wo), nullptr, h.data(), T, QS, H);
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
      // ffn_norm -> SwiGLU -> down, residual
      cpu::rmsnorm(x.data(), ptr(L.ffn_norm), h.data(), T, H, eps, &threads_);
      cpu::linear(h.data(), ptr(L.w_gate), nullptr, gate.data(), T, H, I);
      cpu::linear(h.data(), ptr(L.w_up), nullptr, up.data(), T, H, I);
      cpu::silu_mul(gate.data(), up.data(), gate.data(), T * I, &threads_);
      cpu::linear(gate.data(), ptr(L.w_down), nullptr, h.data(), T, I, H);
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    }

    // Output rows: final norm, then the LM head unless hidden states were asked for.
    const int64_t R = static_cast<int64_t>(b.output_tokens.size());
    std::vector<float> rows(static_cast<size_t>(R * H));
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(&rows[static_cast<size_t>(r * H)], &x[static_cast<size_t>(b.output_tokens[static_cast<size_t>(r)] * H)], static_cast<size_t>(H) * 4);
    cpu::rmsnorm(rows.data(), ptr(final_norm_), rows.data(), R, H, eps);
    if (b.output == ForwardBatch::Output::kHidden) {
      out = std::move(rows);
      return;
    }
    out.assign(static_cast<size_t>(R * cfg_.vocab_size), 0.0f);
    cpu::linear(rows.data(), ptr(lm_head_), nullptr, out.data(), R, H, cfg_.vocab_size);
    if (b.output == ForwardBatch::Output::kArgmax || b.output == ForwardBatch::Output::kSample) {
      const int64_t n = argmax_span(b, cfg_.vocab_size);
      std::vector<int32_t> ids(static_cast<size_t>(R));
      if (b.output == ForwardBatch::Output::kArgmax)
        cpu::argmax_rows(out.data(), R, cfg_.vocab_size, n, ids.data());
      else
        cpu::sample_rows(out.data(), R, cfg_.vocab_size, n, b.sampling.data(), ids.data());
      out.assign(ids.begin(), ids.end());
    }
  }

  void inject(const InjectBatch& b) override {
    const size_t N = b.src_slots.size();
    IS_CHECK(b.dst_slots.size() == N && b.positions.size() == N, "inject arrays differ in size");
    const int64_t KS = cfg_.kv_size();
    check_slots(b.src_slots, num_pool_blocks_, "pool");
    check_slots(b.dst_slots, num_blocks_, "cache");
    const int64_t half = cfg_.head_dim / 2;
    std::vector<float> cosv(N * static_cast<size_t>(half)), sinv(N * static_cast<size_t>(half));
    for (size_t i = 0; i < N; ++i) rope_.angles(b.positions[i], &cosv[i * half], &sinv[i * half]);
    std::vector<float> row(static_cast<size_t>(KS));
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const float* kp = k_pool_[static_cast<size_t>(l)].as<float>();
      const float* vp = v_pool_[static_cast<size_t>(l)].as<float>();
      float* kc = k_cache_[static_cast<size_t>(l)].as<float>();
      float* vc = v_cache_[static_cast<size_t>(l)].as<float>();
      for (size_t i = 0; i < N; ++i) {
        std::memcpy(row.data(), kp + b.src_slots[i] * KS, static_cast<size_t>(KS) * 4);
        rope_.rotate_with(row.data(), cfg_.num_kv_heads, &cosv[i * half], &sinv[i * half]);
        std::memcpy(kc + b.dst_slots[i] * KS, row.data(), static_cast<size_t>(KS) * 4);
        std::memcpy(vc + b.dst_slots[i] * KS, vp + b.src_slots[i] * KS, static_cast<size_t>(KS) * 4);
      }
    }
  }

  void read_pool(const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) override {
    check_slots(slots, num_pool_blocks_, "pool");
    copy_out(k_pool_, v_pool_, slots, k, v);
  }

  void write_pool(const std::vector<int64_t>& slots, const std::vector<float>& k, const std::vector<float>& v) override {
    check_slots(slots, num_pool_blocks_, "pool");
    const int64_t KS = cfg_.kv_size();
    const int64_t n = static_cast<int64_t>(slots.size());
    IS_CHECK(k.size() == static_cast<size_t>(cfg_.num_layers * n * KS) && v.size() == k.size(), "write_pool sizes");
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      cpu::scatter_rows(k.data() + l * n * KS, slots.data(), k_pool_[static_cast<size_t>(l)].as<float>(), n, KS);
      cpu::scatter_rows(v.data() + l * n * KS, slots.data(), v_pool_[static_cast<size_t>(l)].as<float>(), n, KS);
    }
  }

  void read_cache(const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) override {
    check_slots(slots, num_blocks_, "cache");
    copy_out(k_cache_, v_cache_, slots, k, v);
  }

 private:
  void check_slots(const std::vector<int64_t>& slots, int64_t blocks, const char* what) const {
    for (int64_t s : slots) IS_CHECK(s >= 0 && s < blocks * block_size_, "{} slot {} out of range", what, s);
  }
  void copy_out(const std::vector<HostTensor>& ks, const std::vector<HostTensor>& vs, const std::vector<int64_t>& slots,
                std::vector<float>& k, std::vector<float>& v) const {
    const int64_t KS = cfg_.kv_size();
    const int64_t n = static_cast<int64_t>(slots.size());
    k.assign(static_cast<size_t>(cfg_.num_layers * n * KS), 0.0f);
    v.assign(k.size(), 0.0f);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      cpu::gather_rows(ks[static_cast<size_t>(l)].as<float>(), slots.data(), k.data() + l * n * KS, n, KS);
      cpu::gather_rows(vs[static_cast<size_t>(l)].as<float>(), slots.data(), v.data() + l * n * KS, n, KS);
    }
  }

  struct Workspace {
    std::vector<float> x, h, q, k, v, attn, gate, up, cos, sin;
  };

  ModelConfig cfg_;
  Rope rope_;
  Workspace ws_;
  int32_t block_size_;
  ThreadPool threads_;  // attention, norms, SiLU; GEMMs use OpenBLAS's own threads
  int64_t num_blocks_ = 0;
  int64_t num_pool_blocks_ = 0;

  HostTensor embed_, final_norm_, lm_head_;
  std::vector<F32Layer> layers_;
  std::vector<HostTensor> k_cache_, v_cache_;  // per layer [num_blocks, bs, NKV, D]
  std::vector<HostTensor> k_pool_, v_pool_;    // per layer [num_pool_blocks, bs, NKV, D], K pre-RoPE
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts) {
  return std::make_unique<CpuBackend>(cfg, weights, opts);
}

}  // namespace inferscale
