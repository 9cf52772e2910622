// Seeded random weights of a config's shape, for benchmarks and the demo model.
//
// Determinism: element i of a tensor is a pure function of (seed, tensor name, i): a counter-based
// generator (splitmix64 of key + i), so the values do not depend on the thread count or on the
// order chunks run in. Each tensor's key is XXH3 of its role name with the seed.
//
// Distribution: matrices and embeddings ~ 0.02 x z, biases ~ 0.02 x z, norm weights = 1, where z is
// an Irwin-Hall sum of four uniforms rescaled to mean 0, variance 1 (close to a standard normal,
// tails cut at +-3.46; one hash per element, several times faster than Box-Muller).
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "model/model.h"
#include "util/check.h"

namespace inferscale {

namespace {

constexpr double kStd = 0.02;
constexpr int64_t kChunk = 1 << 16;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Approximately N(0, 1) from one 64-bit hash: four 16-bit uniforms summed (mean 2, var 1/3 in [0, 4)).
float approx_normal(uint64_t h) {
  constexpr float kScale = 1.0f / 65536.0f;
  const float s = static_cast<float>(h & 0xffff) + static_cast<float>((h >> 16) & 0xffff) +
                  static_cast<float>((h >> 32) & 0xffff) + static_cast<float>(h >> 48);
  return (s * kScale + 2.0f * kScale - 2.0f) * 1.7320508f;  // +2/65536 centres the discrete uniforms
}

// An owned tensor whose pages are first touched by the parallel fill, not by a serial memset.
HostTensor uninitialized(DType dt, std::vector<int64_t> shape) {
  HostTensor t = HostTensor::view(dt, std::move(shape), nullptr);
  const size_t bytes = (t.nbytes() + 63) / 64 * 64 + 64;
  void* p = std::aligned_alloc(64, bytes);
  IS_REQUIRE(p != nullptr, kResource, "out of host memory allocating {} bytes of random weights", bytes);
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return t;
}

enum class Fill { kNormal, kOnes };

struct Job {
  HostTensor* t;
  uint64_t key;
  Fill fill;
};

class Builder {
 public:
  Builder(uint64_t seed, DType dt) : seed_(seed), dt_(dt) {}

  void add(HostTensor& t, const std::string& name, std::vector<int64_t> shape, Fill fill) {
    t = uninitialized(dt_, std::move(shape));
    jobs_.push_back({&t, XXH3_64bits_withSeed(name.data(), name.size(), seed_), fill});
  }

  // All tensors, split into fixed chunks, filled in parallel.
  void run() {
    std::vector<std::pair<size_t, int64_t>> chunks;  // (job, first element)
    for (size_t j = 0; j < jobs_.size(); ++j)
      for (int64_t b = 0; b < jobs_[j].t->numel(); b += kChunk) chunks.emplace_back(j, b);
    const int64_t n = static_cast<int64_t>(chunks.size());
#pragma omp parallel
    {
      std::vector<float> buf(kChunk);
#pragma omp for schedule(dynamic, 4)
      for (int64_t c = 0; c < n; ++c) {
        const Job& job = jobs_[chunks[static_cast<size_t>(c)].first];
        const int64_t begin = chunks[static_cast<size_t>(c)].second;
        const int64_t len = std::min(kChunk, job.t->numel() - begin);
        if (job.fill == Fill::kOnes) {
          std::fill_n(buf.data(), len, 1.0f);
        } else {
          const uint64_t base = job.key + static_cast<uint64_t>(begin);
          for (int64_t i = 0; i < len; ++i)
            buf[static_cast<size_t>(i)] = static_cast<float>(kStd) * approx_normal(splitmix64(base + static_cast<uint64_t>(i)));
        }
        convert_from_f32(dt_, buf.data(), static_cast<uint8_t*>(job.t->data) + begin * static_cast<int64_t>(dtype_size(dt_)),
                         static_cast<size_t>(len));
      }
    }
  }

 private:
  uint64_t seed_;
  DType dt_;
  std::vector<Job> jobs_;
};

}  // namespace

ModelWeights make_random_weights(const ModelConfig& cfg, uint64_t seed, DType dtype) {
  IS_REQUIRE(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16, kInvalidInput,
             "random weights need dtype f32, f16 or bf16, got {}", dtype_name(dtype));
  const int64_t h = cfg.hidden_size;
  ModelWeights w;
  Builder b(seed, dtype);
  b.add(w.embed, "embed", {cfg.vocab_size, h}, Fill::kNormal);  // [vocab, hidden]
  b.add(w.final_norm, "final_norm", {h}, Fill::kOnes);
  if (!cfg.tie_word_embeddings) b.add(w.lm_head, "lm_head", {cfg.vocab_size, h}, Fill::kNormal);
  w.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    b.add(l.attn_norm, p + "attn_norm", {h}, Fill::kOnes);
    b.add(l.wq, p + "wq", {cfg.q_size(), h}, Fill::kNormal);
    b.add(l.wk, p + "wk", {cfg.kv_size(), h}, Fill::kNormal);
    b.add(l.wv, p + "wv", {cfg.kv_size(), h}, Fill::kNormal);
    b.add(l.wo, p + "wo", {h, cfg.q_size()}, Fill::kNormal);
    if (cfg.attention_bias) {
      b.add(l.bq, p + "bq", {cfg.q_size()}, Fill::kNormal);
      b.add(l.bk, p + "bk", {cfg.kv_size()}, Fill::kNormal);
      b.add(l.bv, p + "bv", {cfg.kv_size()}, Fill::kNormal);
    }
    if (cfg.qk_norm) {
      b.add(l.q_norm, p + "q_norm", {cfg.head_dim}, Fill::kOnes);
      b.add(l.k_norm, p + "k_norm", {cfg.head_dim}, Fill::kOnes);
    }
    b.add(l.ffn_norm, p + "ffn_norm", {h}, Fill::kOnes);
    b.add(l.w_gate, p + "w_gate", {cfg.intermediate_size, h}, Fill::kNormal);
    b.add(l.w_up, p + "w_up", {cfg.intermediate_size, h}, Fill::kNormal);
    b.add(l.w_down, p + "w_down", {h, cfg.intermediate_size}, Fill::kNormal);
  }
  b.run();
  if (cfg.tie_word_embeddings) w.lm_head = w.embed;  // shares storage
  return w;
}

}  // namespace inferscale
