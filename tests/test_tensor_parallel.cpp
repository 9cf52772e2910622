// Tensor parallelism on the CPU (model/tensor_parallel.h, backend/cpu/cpu_tensor_parallel.cpp):
// the model split over 2, 3 or 4 ranks, each a thread with 1/N of the heads and of the MLP and a
// sum in rank order for the all-reduce, gives the logits of one rank within f32 rounding:
//   - a prefill and a decode step with facts injected from the memory pool, copied into the cache
//     and read in place, at GQA 1, 2 and 4, with q/k/v biases and with q/k norms;
//   - greedy tokens through the engine;
//   - SmolLM2-135M-Instruct (Q4_1 blocks sliced whole) at 3 ranks, when fetched.
// Pool rows keep the whole-head layout at any N; a size that does not split the model is refused;
// a batch every rank would refuse fails alone, a rank failing mid-forward ends the group.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/rank_group.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "facts_in_place_util.h"
#include "forwarding_backend.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::facts_test;

namespace {

BackendOptions options(int32_t tp) {
  BackendOptions o;
  o.block_size = kBs;
  o.num_cache_blocks = 64;
  o.num_pool_blocks = 16;
  o.num_threads = 2;
  o.tensor_parallel_size = tp;
  return o;
}

// Largest |a - b| over the largest |a|: f32 rounding of sums taken in another order is ~1e-6.
float relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 0;
  for (float x : a) scale = std::max(scale, std::fabs(x));
  return max_abs_diff(a, b) / std::max(scale, 1e-6f);
}

struct Served {
  Logits copy, in_place;
};

// The facts_in_place_util sequence on `tp` ranks: the same pool rows (one seed), the facts copied
// in, then read in place.
Served serve_on(const ModelConfig& c, const ModelWeights& w, int32_t tp) {
  auto be = make_cpu_backend(c, w, options(tp));
  const Layout l;
  const std::vector<int64_t> pool = fact_pool_slots(l);
  fill_pool(*be, pool, 11);
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(static_cast<size_t>(l.total() + 1));
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  return {serve(*be, l, tokens, pool, false, 0), serve(*be, l, tokens, pool, true, 32)};
}

void expect_same(const Served& one, const Served& n, const std::string& what) {
  EXPECT_LE(relative_diff(one.copy.prefill, n.copy.prefill), 2e-5f) << what << ", facts copied, prefill";
  EXPECT_LE(relative_diff(one.copy.decode, n.copy.decode), 2e-5f) << what << ", facts copied, decode";
  EXPECT_LE(relative_diff(one.in_place.prefill, n.in_place.prefill), 2e-5f) << what << ", facts in place, prefill";
  EXPECT_LE(relative_diff(one.in_place.decode, n.in_place.decode), 2e-5f) << what << ", facts in place, decode";
}

}  // namespace

TEST(TensorParallel, LogitsWithInjectedFactsEqualOneRank) {
  struct Case {
    Shape shape;
    bool bias, qk_norm;
    std::vector<int32_t> tps;
  };
  const Case cases[] = {{{4, 4, 64}, false, false, {2, 4}},
                        {{8, 4, 64}, true, false, {2, 4}},
                        {{8, 2, 128}, false, true, {2}},
                        {{12, 3, 64}, true, true, {3}}};
  for (const Case& k : cases) {
    ModelConfig c = config(k.shape);
    c.intermediate_size = 192;
    c.attention_bias = k.bias;
    c.qk_norm = k.qk_norm;
    const ModelWeights w = make_random_weights(c, 7);
    const Served one = serve_on(c, w, 1);
    for (int32_t tp : k.tps) {
      const std::string what = std::to_string(k.shape.heads) + "/" + std::to_string(k.shape.kv_heads) + " heads, tp " +
                               std::to_string(tp) + (k.bias ? ", biases" : "") + (k.qk_norm ? ", qk norm" : "");
      expect_same(one, serve_on(c, w, tp), what);
    }
  }
}

TEST(TensorParallel, GreedyTokensThroughTheEngineEqualOneRank) {
  const Model demo = load_model("demo");
  std::vector<std::vector<int32_t>> answers;
  for (int32_t tp : {1, 2, 4}) {
    BackendOptions o = options(tp);
    o.num_cache_blocks = 128;
    Engine e(make_cpu_backend(demo.config, demo.weights, o), demo.tokenizer, EngineOptions{});
    for (uint32_t seed : {1u, 2u, 3u}) e.add_request(test::byte_prompt(20 + static_cast<int>(seed) * 7, seed), test::greedy(32));
    std::vector<int32_t> all;
    for (const auto& r : e.run_to_completion()) all.insert(all.end(), r.new_tokens.begin(), r.new_tokens.end());
    ASSERT_EQ(all.size(), 3u * 32u);
    answers.push_back(all);
  }
  EXPECT_EQ(answers[1], answers[0]) << "tp 2";
  EXPECT_EQ(answers[2], answers[0]) << "tp 4";
}

// A prefill of 30 tokens in cache blocks 0 and 1 that captures tokens 5..14 into pool slots 0..9,
// probes rows 25..29 over keys [3, 20) from `first_layer` on, and samples rows 27 and 29.
ForwardBatch captures_and_probes(const ModelConfig& c, int32_t first_layer = 0) {
  ForwardBatch b;
  for (int32_t p = 0; p < 30; ++p) {
    b.token_ids.push_back((p * 37 + 11) % static_cast<int32_t>(c.vocab_size));
    b.positions.push_back(p);
    b.slot_mapping.push_back(p);  // blocks 0 and 1
  }
  b.q_indptr = {0, 30};
  b.kv_indices = {0, 1};
  b.kv_indptr = {0, 2};
  for (int32_t t = 5; t < 15; ++t) {
    b.capture_tokens.push_back(t);
    b.capture_slots.push_back(t - 5);
  }
  b.probes.push_back({0, 25, 3, 20, first_layer});
  b.output_tokens = {27, 29};
  b.output = ForwardBatch::Output::kSample;
  b.sampling = {{0.9f, 20, 0.9f, 0.3f}, {1.1f, 0, 1.0f, 0.7f}};
  return b;
}

// The forward's other outputs under the split: captured pool rows (each rank its kv heads), the
// probe's attention mass (summed over the ranks' heads) and sampled ids equal one rank's.
TEST(TensorParallel, CapturesProbesAndSamplesEqualOneRank) {
  const ModelConfig c = config({8, 4, 64});
  const ModelWeights w = make_random_weights(c, 5);
  const ForwardBatch b = captures_and_probes(c);
  struct Out {
    ForwardOutput fo;
    HostTensor k, v;
  };
  auto run = [&](int32_t tp) {
    auto be = make_cpu_backend(c, w, options(tp));
    Out o;
    be->forward(b, o.fo);
    be->read_pool({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, o.k, o.v);
    return o;
  };
  const Out one = run(1);
  ASSERT_EQ(one.fo.probe_mass.size(), 5u * 17u);
  for (int32_t tp : {2, 4}) {
    const Out n = run(tp);
    EXPECT_EQ(n.fo.ids, one.fo.ids) << "tp " << tp;
    EXPECT_LE(relative_diff(one.fo.probe_mass, n.fo.probe_mass), 2e-5f) << "tp " << tp;
    const auto rows = [](const HostTensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); };
    EXPECT_LE(relative_diff(rows(one.k), rows(n.k)), 2e-5f) << "tp " << tp;
    EXPECT_LE(relative_diff(rows(one.v), rows(n.v)), 2e-5f) << "tp " << tp;
  }
}

// A probe sums the layers from its first_layer on: from the last layer it keeps that layer's
// weights alone, from every layer at least as much on every key, and on several ranks the same.
TEST(TensorParallel, ProbesSumTheLayersFromTheirFirstLayer) {
  const ModelConfig c = config({8, 4, 64});
  const ModelWeights w = make_random_weights(c, 5);
  const auto mass = [&](int32_t tp, int32_t first_layer) {
    ForwardOutput fo;
    make_cpu_backend(c, w, options(tp))->forward(captures_and_probes(c, first_layer), fo);
    return fo.probe_mass;
  };
  const int32_t last = static_cast<int32_t>(c.num_layers) - 1;
  ASSERT_GE(last, 1);
  const std::vector<float> every = mass(1, 0), upper = mass(1, last);
  ASSERT_EQ(every.size(), upper.size());
  double sum_every = 0, sum_upper = 0;
  for (size_t i = 0; i < every.size(); ++i) {
    EXPECT_GE(every[i], upper[i] - 1e-6f) << i;
    sum_every += every[i];
    sum_upper += upper[i];
  }
  // Each of the 5 rows spreads at most 1 per layer and head over the 17 keys.
  EXPECT_GT(sum_upper, 0.0);
  EXPECT_LE(sum_upper, 5.0 * static_cast<double>(c.num_heads) + 1e-3);
  EXPECT_GT(sum_every, sum_upper);
  EXPECT_LE(relative_diff(upper, mass(2, last)), 2e-5f);
}

TEST(TensorParallel, PoolRowsKeepTheWholeHeadLayout) {
  const ModelConfig c = config({8, 4, 64});
  const ModelWeights w = make_random_weights(c, 3);
  auto one = make_cpu_backend(c, w, options(1));
  auto four = make_cpu_backend(c, w, options(4));
  const std::vector<int64_t> slots{0, 5, 17, 40, 255};
  fill_pool(*one, slots, 9);
  HostTensor k, v, k4, v4;
  one->read_pool(slots, k, v);
  four->write_pool(slots, k, v);  // what a KV file written by one rank holds
  four->read_pool(slots, k4, v4);
  ASSERT_EQ(k4.shape, k.shape);
  EXPECT_EQ(0, std::memcmp(k4.data, k.data, k.nbytes()));
  EXPECT_EQ(0, std::memcmp(v4.data, v.data, v.nbytes()));
  // The cache after injecting those rows: the same rows, rotated, at every N.
  InjectBatch inj{slots, {3, 4, 20, 33, 70}, {0, 1, 2, 3, 4}};
  one->inject(inj);
  four->inject(inj);
  one->read_cache(inj.dst_slots, k, v);
  four->read_cache(inj.dst_slots, k4, v4);
  EXPECT_EQ(0, std::memcmp(k4.data, k.data, k.nbytes()));
  EXPECT_EQ(0, std::memcmp(v4.data, v.data, v.nbytes()));
}

TEST(TensorParallel, SizesThatDoNotSplitTheModelAreRefused) {
  ModelConfig c = config({8, 4, 64});
  c.intermediate_size = 150;
  const ModelWeights w = make_random_weights(c, 3);
  // 0 and -2 are no size, 3 splits no head count, 4 not the intermediate size, 8 not the kv heads.
  for (int32_t tp : {0, -2, 3, 4, 8}) {
    try {
      make_cpu_backend(c, w, options(tp));
      ADD_FAILURE() << "tp " << tp << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput) << tp << ": " << e.what();
    }
  }
  const ModelConfig s = shard_config(c, 2);
  EXPECT_EQ(s.num_heads, 4);
  EXPECT_EQ(s.num_kv_heads, 2);
  EXPECT_EQ(s.intermediate_size, 75);
  EXPECT_EQ(s.head_dim, c.head_dim);
  EXPECT_EQ(s.hidden_size, c.hidden_size);
  EXPECT_NO_THROW(make_cpu_backend(c, w, options(2)));
}

// Columns of a block-quantized matrix cut on whole blocks stay blocks; a cut inside a block is f32;
// both hold the values of the same columns of the whole.
TEST(TensorParallel, ColumnSlicesKeepTheirValues) {
  // A [3, 128] Q8_0 matrix (4 blocks a row: an f16 scale and 32 int8 codes each).
  const int64_t rows = 3, cols = 128, per_row = cols / 32;
  HostTensor q = HostTensor::zeros(DType::kQ8_0, {rows, cols});
  std::mt19937 rng(1);
  for (int64_t b = 0; b < rows * per_row; ++b) {
    unsigned char* block = q.as<unsigned char>() + b * 34;
    const uint16_t d = f32_to_f16(0.01f * static_cast<float>(1 + b));
    std::memcpy(block, &d, 2);
    for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<unsigned char>(rng());
  }
  const HostTensor full = q.to_f32();
  for (const auto& [first, count, dtype] : {std::tuple{int64_t{64}, int64_t{64}, DType::kQ8_0}, std::tuple{int64_t{40}, int64_t{72}, DType::kF32}}) {
    const HostTensor s = column_slice(q, first, count);
    EXPECT_EQ(s.dtype, dtype);
    const HostTensor f = s.to_f32();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < count; ++j)
        ASSERT_EQ(f.as<float>()[r * count + j], full.as<float>()[r * cols + first + j]) << r << ", " << j;
  }
}

// A rank whose forward fails mid-way (after rank 0 sent it, before its first all-reduce) ends the
// group: rank 0's forward throws instead of waiting for it, so does every later call, and the
// group stops without hanging.
TEST(TensorParallel, ARankThatFailsEndsTheGroup) {
  struct Failing final : test_support::ForwardingBackend {
    using ForwardingBackend::ForwardingBackend;
    using Backend::forward;
    void forward(const ForwardBatch&, ForwardOutput&) override { IS_THROW(kResource, "out of memory (planted)"); }
  };
  const Model demo = load_model("demo");
  const ModelConfig rank_cfg = shard_config(demo.config, 2);
  auto [root_end, rank_end] = ByteChannel::pair();
  auto [cmd0, cmd1] = ByteChannel::pair();
  std::vector<ByteChannel> root_ends;
  root_ends.push_back(std::move(root_end));
  auto root = std::make_shared<RootReduce>(std::move(root_ends));
  auto reduce = std::make_shared<RankReduce>(std::move(rank_end));
  RankGroup g;
  BackendOptions o = options(1);
  g.local = make_cpu_rank_backend(rank_cfg, shard_weights(demo.weights, demo.config, {0, 2}), o, {root.get(), 0});
  g.commands.push_back(std::move(cmd0));
  auto failing = std::make_shared<Failing>(
      make_cpu_rank_backend(rank_cfg, shard_weights(demo.weights, demo.config, {1, 2}), o, {reduce.get(), 1}));
  g.workers.threads.emplace_back([failing, reduce, commands = std::move(cmd1)]() mutable {
    serve_rank(*failing, commands, [&] { reduce->shutdown(); });
  });
  g.abort_reduce = [r = root.get()] { r->shutdown(); };
  g.reduce = root;
  {
    RankGroupBackend be(demo.config, std::move(g));
    std::vector<float> logits;
    const ForwardBatch b = test::seqs_in_blocks({{1, 2, 3}}, {0});
    try {
      be.forward(b, logits);
      ADD_FAILURE() << "the forward succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor-parallel rank failed"), std::string::npos) << e.what();
    }
    EXPECT_THROW(be.forward(b, logits), Error);
    HostTensor k, v;
    EXPECT_THROW(be.read_pool({0}, k, v), Error);
  }  // joins the rank's thread
}

// A batch every rank refuses (a token past the vocabulary) fails the forward; the next runs.
TEST(TensorParallel, ABadBatchFailsAndTheNextRuns) {
  const Model demo = load_model("demo");
  auto be = make_cpu_backend(demo.config, demo.weights, options(2));
  ForwardBatch bad = test::seqs_in_blocks({{1, 2, 100000}}, {0});
  std::vector<float> logits;
  EXPECT_THROW(be->forward(bad, logits), Error);
  ForwardBatch good = test::seqs_in_blocks({{1, 2, 3}}, {0});
  be->forward(good, logits);
  auto one = make_cpu_backend(demo.config, demo.weights, options(1));
  std::vector<float> ref;
  one->forward(good, ref);
  EXPECT_LE(relative_diff(ref, logits), 2e-5f);
}

TEST(TensorParallel, SmolLM2LogitsAtThreeRanksEqualOne) {
  const std::string path = std::string(INFERSCALE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (scripts/setup.sh fetches it)";
  const Model m = load_model(path);
  const std::vector<int32_t> ids = m.tokenizer->encode("The capital of France is Paris, and of Italy");
  ASSERT_LE(ids.size(), 16u);  // one cache block
  ForwardBatch b = test::seqs_in_blocks({ids}, {0});
  std::vector<float> one, three;
  BackendOptions o = options(1);
  make_cpu_backend(m.config, m.weights, o)->forward(b, one);
  o.tensor_parallel_size = 3;
  make_cpu_backend(m.config, m.weights, o)->forward(b, three);
  EXPECT_LE(relative_diff(one, three), 2e-5f);
  EXPECT_EQ(std::max_element(one.begin(), one.end()) - one.begin(), std::max_element(three.begin(), three.end()) - three.begin());
}
