// Block-quantized weights on the GPU: DeviceWeights::upload dequantizes them (in chunks of rows,
// HostTensor::rows_to_f32, then bf16) and the CUDA forward matches the CPU forward on the same
// values (the CPU twin gets the dequantized weights rounded to bf16, i.e. exactly what the GPU
// holds). Every supported block type appears; the Q8_0 embedding is the tied head and large
// enough (20,000 x 256) to span two upload chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "model/weights.h"
#include "tensor/quant.h"

namespace inferscale {
namespace {

ModelConfig quant_config() {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 64;
  c.vocab_size = 20000;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_interleaved = true;
  c.tie_word_embeddings = true;
  return c;
}

uint16_t half(float x) { return f32_to_f16(x); }

// Random blocks of `dt` with f16 scales picked so that values stay around +-0.05..0.1, the mins
// set to centre them (a min = -scale x the mean quant).
HostTensor random_quant(DType dt, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t = HostTensor::zeros(dt, std::move(shape));
  std::mt19937_64 g(seed);
  auto* bytes = t.as<uint8_t>();
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(g());
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  const BlockShape b = dtype_block(dt);
  const int64_t n_blocks = static_cast<int64_t>(t.nbytes()) / b.bytes;
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* p = bytes + i * b.bytes;
    const float s = u(g);
    switch (dt) {
      case DType::kQ4_0: reinterpret_cast<quant::BlockQ4_0*>(p)->d = half(0.012f * s); break;
      case DType::kQ4_1: {
        auto* q = reinterpret_cast<quant::BlockQ4_1*>(p);
        q->d = half(0.012f * s), q->m = half(-0.09f * s);
        break;
      }
      case DType::kQ5_0: reinterpret_cast<quant::BlockQ5_0*>(p)->d = half(0.006f * s); break;
      case DType::kQ5_1: {
        auto* q = reinterpret_cast<quant::BlockQ5_1*>(p);
        q->d = half(0.006f * s), q->m = half(-0.09f * s);
        break;
      }
      case DType::kQ8_0: reinterpret_cast<quant::BlockQ8_0*>(p)->d = half(0.008f * s); break;
      case DType::kQ2_K: {
        auto* q = reinterpret_cast<quant::BlockQ2_K*>(p);
        q->d = half(0.004f * s), q->dmin = half(0.006f * s);
        break;
      }
      case DType::kQ3_K: reinterpret_cast<quant::BlockQ3_K*>(p)->d = half(0.0008f * s); break;
      case DType::kQ4_K: {
        auto* q = reinterpret_cast<quant::BlockQ4_K*>(p);
        q->d = half(0.0001f * s), q->dmin = half(0.00075f * s);
        break;
      }
      case DType::kQ5_K: {
        auto* q = reinterpret_cast<quant::BlockQ5_K*>(p);
        q->d = half(0.00005f * s), q->dmin = half(0.000775f * s);
        break;
      }
      case DType::kQ6_K: reinterpret_cast<quant::BlockQ6_K*>(p)->d = half(0.00001f * s); break;
      default: ADD_FAILURE() << "not a block type";
    }
  }
  return t;
}

HostTensor ones_ish(int64_t n, uint64_t seed) {
  HostTensor t = HostTensor::zeros(DType::kF32, {n});
  const auto v = test::round_bf16(test::randn(static_cast<size_t>(n), seed, 0.1f, 1.0f));
  std::memcpy(t.data, v.data(), v.size() * 4);
  return t;
}

ModelWeights quant_weights(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, QS = c.q_size(), KS = c.kv_size();
  ModelWeights w;
  uint64_t seed = 77;
  w.embed = random_quant(DType::kQ8_0, {c.vocab_size, H}, seed++);
  w.lm_head = w.embed;
  w.final_norm = ones_ish(H, seed++);
  const DType kinds[3][7] = {
      {DType::kQ4_K, DType::kQ5_0, DType::kQ4_1, DType::kQ6_K, DType::kQ4_0, DType::kQ5_1, DType::kQ3_K},
      {DType::kQ4_1, DType::kQ8_0, DType::kQ5_1, DType::kQ5_K, DType::kQ4_K, DType::kQ4_1, DType::kQ5_K},
      {DType::kQ6_K, DType::kQ4_0, DType::kQ5_0, DType::kQ2_K, DType::kQ4_1, DType::kQ3_K, DType::kQ2_K},
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DType* k = kinds[l];
    LayerWeights L;
    L.attn_norm = ones_ish(H, seed++);
    L.ffn_norm = ones_ish(H, seed++);
    L.wq = random_quant(k[0], {QS, H}, seed++);
    L.wk = random_quant(k[1], {KS, H}, seed++);
    L.wv = random_quant(k[2], {KS, H}, seed++);
    L.wo = random_quant(k[3], {H, QS}, seed++);
    L.w_gate = random_quant(k[4], {I, H}, seed++);
    L.w_up = random_quant(k[5], {I, H}, seed++);
    L.w_down = random_quant(k[6], {H, I}, seed++);
    w.layers.push_back(std::move(L));
  }
  return w;
}

// The CPU twin's weights: each tensor dequantized, then rounded to bf16 (what the GPU stores).
HostTensor bf16_rounded_f32(const HostTensor& t) {
  HostTensor f = HostTensor::zeros(DType::kF32, t.shape);
  const HostTensor d = t.to_f32();
  const auto v = test::round_bf16(std::vector<float>(d.as<float>(), d.as<float>() + d.numel()));
  std::memcpy(f.data, v.data(), v.size() * 4);
  return f;
}

ModelWeights cpu_twin(const ModelWeights& q) {
  ModelWeights w;
  w.embed = bf16_rounded_f32(q.embed);
  w.lm_head = w.embed;
  w.final_norm = q.final_norm;
  for (const LayerWeights& l : q.layers) {
    LayerWeights L;
    L.attn_norm = l.attn_norm;
    L.ffn_norm = l.ffn_norm;
    for (auto f : {&LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::w_gate,
                   &LayerWeights::w_up, &LayerWeights::w_down})
      L.*f = bf16_rounded_f32(l.*f);
    w.layers.push_back(std::move(L));
  }
  return w;
}

int32_t argmax(const float* p, int64_t n) { return static_cast<int32_t>(std::max_element(p, p + n) - p); }

TEST(CudaQuantWeights, UploadDequantizesEveryBlockTypeLikeTheCpu) {
  REQUIRE_GPU();
  const ModelConfig c = quant_config();
  const ModelWeights q = quant_weights(c);
  BackendOptions o;
  o.num_cache_blocks = 16;
  auto gpu = make_cuda_backend(c, q, o);
  auto cpu = make_cpu_backend(c, cpu_twin(q), o);
  const int64_t V = c.vocab_size;
  std::mt19937 g(5);
  std::vector<int32_t> tokens(37);
  for (auto& t : tokens) t = static_cast<int32_t>(g() % V);
  std::vector<float> lc, lg;
  int agree = 0, total = 0;
  // A 37-token prefill (logits of every token), then 4 greedy decode steps fed with the CPU's tokens.
  for (int32_t step = 0; step < 5; ++step) {
    ForwardBatch fb;
    const int32_t begin = step == 0 ? 0 : static_cast<int32_t>(tokens.size()) - 1;
    for (int32_t i = begin; i < static_cast<int32_t>(tokens.size()); ++i) {
      fb.token_ids.push_back(tokens[static_cast<size_t>(i)]);
      fb.positions.push_back(i);
      fb.slot_mapping.push_back(i);
      fb.output_tokens.push_back(i - begin);
    }
    fb.q_indptr = {0, fb.num_tokens()};
    for (int32_t b = 0; b * o.block_size < static_cast<int32_t>(tokens.size()); ++b) fb.kv_indices.push_back(b);
    fb.kv_indptr = {0, static_cast<int32_t>(fb.kv_indices.size())};
    cpu->forward(fb, lc);
    gpu->forward(fb, lg);
    test::record("quant_weights/step" + std::to_string(step), test::compare(lg, lc), 2e-2);
    for (size_t r = 0; r < fb.output_tokens.size(); ++r) {
      agree += argmax(&lc[r * V], V) == argmax(&lg[r * V], V);
      ++total;
    }
    tokens.push_back(argmax(&lc[(fb.output_tokens.size() - 1) * V], V));
  }
  test::note("quant_weights/greedy", std::to_string(agree) + "/" + std::to_string(total) + " argmax equal");
  EXPECT_GE(agree * 10, total * 8);
}

}  // namespace
}  // namespace inferscale
