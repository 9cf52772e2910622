// Whole-forward parity: CudaBackend vs CpuBackend on small random models (the same weights,
// rounded to bf16, for both), through prefill, decode, chunked prefill, capture, hidden-state
// output and memory injection (Chunked RoPE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/cpu_twins.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/graph_batch.h"
#include "cuda_test_util.h"
#include "model/weights.h"
#include "../facts_in_place_util.h"
#include "../fp8_test_util.h"
#include "../kv_rows_test_util.h"

namespace inferscale {
namespace {

struct Variant {
  const char* name;
  bool qwen;  // qk-norm + qkv bias + tied embeddings
  int64_t num_heads, num_kv_heads, head_dim;
  int32_t block_size;
  bool interleaved;
};

ModelConfig tiny_config(const Variant& v) {
  ModelConfig c;
  c.arch = v.qwen ? Arch::kQwen3 : Arch::kLlama;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 3;
  c.num_heads = v.num_heads;
  c.num_kv_heads = v.num_kv_heads;
  c.head_dim = v.head_dim;
  c.vocab_size = 1000;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_interleaved = v.interleaved;
  if (!v.qwen) {
    c.rope_scaling.type = RopeType::kLlama3;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
  }
  c.tie_word_embeddings = v.qwen;
  c.attention_bias = v.qwen;
  c.qk_norm = v.qwen;
  return c;
}

// f32 tensors holding bf16-representable values: both backends see the same numbers.
HostTensor rand_tensor(std::vector<int64_t> shape, uint64_t seed, float std, float mean = 0.0f) {
  HostTensor t = HostTensor::zeros(DType::kF32, shape);
  const auto v = test::round_bf16(test::randn(static_cast<size_t>(t.numel()), seed, std, mean));
  std::memcpy(t.data, v.data(), v.size() * 4);
  return t;
}

ModelWeights tiny_weights(const ModelConfig& c, uint64_t seed) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim, QS = c.q_size(), KS = c.kv_size();
  ModelWeights w;
  w.embed = rand_tensor({c.vocab_size, H}, seed++, 1.0f);
  w.final_norm = rand_tensor({H}, seed++, 0.1f, 1.0f);
  w.lm_head = c.tie_word_embeddings ? w.embed : rand_tensor({c.vocab_size, H}, seed++, 0.05f);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights L;
    L.attn_norm = rand_tensor({H}, seed++, 0.1f, 1.0f);
    L.wq = rand_tensor({QS, H}, seed++, 0.1f);
    L.wk = rand_tensor({KS, H}, seed++, 0.1f);
    L.wv = rand_tensor({KS, H}, seed++, 0.05f);
    L.wo = rand_tensor({H, QS}, seed++, 0.05f);
    if (c.attention_bias) {
      L.bq = rand_tensor({QS}, seed++, 0.1f);
      L.bk = rand_tensor({KS}, seed++, 0.1f);
      L.bv = rand_tensor({KS}, seed++, 0.1f);
    }
    if (c.qk_norm) {
      L.q_norm = rand_tensor({D}, seed++, 0.1f, 1.0f);
      L.k_norm = rand_tensor({D}, seed++, 0.1f, 1.0f);
    }
    L.ffn_norm = rand_tensor({H}, seed++, 0.1f, 1.0f);
    L.w_gate = rand_tensor({I, H}, seed++, 0.05f);
    L.w_up = rand_tensor({I, H}, seed++, 0.05f);
    L.w_down = rand_tensor({H, I}, seed++, 0.05f);
    w.layers.push_back(std::move(L));
  }
  return w;
}

// A sequence's blocks (ids shared by both backends: same layout in both caches).
struct Seq {
  std::vector<int32_t> blocks;
  int32_t len = 0;  // positions [0, len) are in the cache
};

class Builder {
 public:
  Builder(int32_t block_size, int32_t* next_block) : bs_(block_size), next_(next_block) { fb.q_indptr = {0}; fb.kv_indptr = {0}; }
  // Appends `toks` at positions start.. (default: the sequence's end); output row for the last one.
  void add(Seq& s, const std::vector<int32_t>& toks, bool output = true, int32_t start = -1,
           const std::vector<int64_t>& capture = {}) {
    const int32_t p0 = start < 0 ? s.len : start;
    const int32_t end = p0 + static_cast<int32_t>(toks.size());
    while (static_cast<int32_t>(s.blocks.size()) * bs_ < end) s.blocks.push_back((*next_)++);
    for (size_t i = 0; i < toks.size(); ++i) {
      const int32_t p = p0 + static_cast<int32_t>(i);
      if (!capture.empty()) {
        fb.capture_tokens.push_back(fb.num_tokens());
        fb.capture_slots.push_back(capture[i]);
      }
      fb.token_ids.push_back(toks[i]);
      fb.positions.push_back(p);
      fb.slot_mapping.push_back(static_cast<int64_t>(s.blocks[static_cast<size_t>(p / bs_)]) * bs_ + p % bs_);
    }
    if (output) fb.output_tokens.push_back(fb.num_tokens() - 1);
    fb.q_indptr.push_back(fb.num_tokens());
    fb.kv_indices.insert(fb.kv_indices.end(), s.blocks.begin(), s.blocks.end());
    fb.kv_indptr.push_back(static_cast<int32_t>(fb.kv_indices.size()));
    s.len = std::max(s.len, end);
  }
  ForwardBatch fb;

 private:
  int32_t bs_;
  int32_t* next_;
};

std::vector<int32_t> random_tokens(size_t n, uint64_t seed, int32_t vocab) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

int32_t argmax(const float* p, int64_t n) { return static_cast<int32_t>(std::max_element(p, p + n) - p); }

// Two backends side by side on the same batches: each step's logits of `got` against `ref`'s
// within `tol` (recorded as tag/what), and how often their argmax agree.
struct SideBySide {
  Backend& ref;
  Backend& got;
  std::string tag;
  int64_t V;
  double tol;
  int32_t agree = 0, total = 0;
  std::vector<float> lr, lg;  // the last step's logits
  void step(const ForwardBatch& fb, const std::string& what) {
    ref.forward(fb, lr);
    got.forward(fb, lg);
    test::record(tag + "/" + what, test::compare(lg, lr), tol);
    for (size_t r = 0; r < fb.output_tokens.size(); ++r) {
      agree += argmax(&lr[r * V], V) == argmax(&lg[r * V], V);
      ++total;
    }
  }
  // The three prompts (17, 1 and 40 tokens) of `seqs` in one batch.
  void prefill_three(std::vector<Seq>& seqs, Builder& b) {
    const size_t lens[] = {17, 1, 40};
    for (size_t s = 0; s < 3; ++s) b.add(seqs[s], random_tokens(lens[s], 80 + s, static_cast<int32_t>(V)));
    step(b.fb, "prefill");
  }
  // At least `tenths` / 10 of the argmax equal.
  void expect_mostly_agree(const std::string& name, int tenths = 7) {
    test::note(tag + "/greedy", std::to_string(agree) + "/" + std::to_string(total) + " argmax equal");
    EXPECT_GE(agree * 10, total * tenths) << name << ": greedy tokens disagree too often";
  }
};

// Extends `req` (blocks taken from *next_block) by pool_slots.size() entries at its end and
// returns the batch injecting those pool slots there, at their serving positions.
InjectBatch inject_at_end(Seq& req, const std::vector<int64_t>& pool_slots, int32_t bs, int32_t* next_block) {
  const int32_t p0 = req.len, n = static_cast<int32_t>(pool_slots.size());
  while (static_cast<int32_t>(req.blocks.size()) * bs < p0 + n) req.blocks.push_back((*next_block)++);
  InjectBatch inj;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = p0 + i;
    inj.src_slots.push_back(pool_slots[static_cast<size_t>(i)]);
    inj.dst_slots.push_back(static_cast<int64_t>(req.blocks[static_cast<size_t>(pos / bs)]) * bs + pos % bs);
    inj.positions.push_back(pos);
  }
  req.len = p0 + n;
  return inj;
}

struct Pair {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<CudaBackend> gpu;
  ModelConfig cfg;
};

// gpu_cache_fp8: the GPU's KV cache in FP8 (the CPU's stays f32); pool_fp8: both memory pools
// in FP8 (the CPU's is the twin).
Pair make_pair(const Variant& v, int64_t cache_blocks, int64_t pool_blocks, bool gpu_cache_fp8 = false,
               bool pool_fp8 = false) {
  Pair p;
  p.cfg = tiny_config(v);
  const ModelWeights w = tiny_weights(p.cfg, 1234);
  BackendOptions o;
  o.block_size = v.block_size;
  o.num_cache_blocks = cache_blocks;
  o.num_pool_blocks = pool_blocks;
  o.pool_fp8 = pool_fp8;
  p.cpu = make_cpu_backend(p.cfg, w, o);
  o.cache_fp8 = gpu_cache_fp8;
  p.gpu = make_cuda_backend(p.cfg, w, o);
  return p;
}

// A fact of 23 random tokens encoded alone (w = 0) at positions 0.. on both backends, every token
// captured into pool slots first_slot..; the pools' rows are compared within `tol` (tag_k, tag_v).
struct CapturedFact {
  std::vector<int32_t> tokens;
  std::vector<int64_t> pool_slots;
  std::vector<float> cpu_k, cpu_v;  // the CPU pool's rows, f32
};
CapturedFact capture_fact(Pair& p, int32_t bs, int32_t* next_block, uint32_t seed, int64_t first_slot,
                          const std::string& tag, double tol) {
  CapturedFact f;
  f.tokens = random_tokens(23, seed, static_cast<int32_t>(p.cfg.vocab_size));
  f.pool_slots.resize(f.tokens.size());
  std::iota(f.pool_slots.begin(), f.pool_slots.end(), first_slot);
  Seq enc;
  Builder b(bs, next_block);
  b.add(enc, f.tokens, true, -1, f.pool_slots);
  std::vector<float> lc, lg, kg, vg;
  p.cpu->forward(b.fb, lc);
  p.gpu->forward(b.fb, lg);
  test::read_pool_f32(*p.cpu, f.pool_slots, f.cpu_k, f.cpu_v);
  test::read_pool_f32(*p.gpu, f.pool_slots, kg, vg);
  test::record(tag + "_k", test::compare(kg, f.cpu_k), tol);
  test::record(tag + "_v", test::compare(vg, f.cpu_v), tol);
  return f;
}

// A request on both backends: a header of `len` random tokens prefilled, then `pool_slots`
// injected after it; the injected cache rows of each backend into (kc, vc) and (kg, vg).
InjectBatch header_then_inject(Pair& p, Seq& req, const std::vector<int64_t>& pool_slots, int32_t bs,
                               int32_t* next_block, size_t len, uint32_t seed, std::vector<float>& kc,
                               std::vector<float>& vc, std::vector<float>& kg, std::vector<float>& vg) {
  Builder hdr(bs, next_block);
  hdr.add(req, random_tokens(len, seed, static_cast<int32_t>(p.cfg.vocab_size)), false);
  std::vector<float> lc, lg;
  p.cpu->forward(hdr.fb, lc);
  p.gpu->forward(hdr.fb, lg);
  InjectBatch inj = inject_at_end(req, pool_slots, bs, next_block);
  p.cpu->inject(inj);
  p.gpu->inject(inj);
  test::read_cache_f32(*p.cpu, inj.dst_slots, kc, vc);
  test::read_cache_f32(*p.gpu, inj.dst_slots, kg, vg);
  return inj;
}

const Variant kVariants[] = {
    {"llama_d64_g4_bs16", false, 4, 1, 64, 16, false},
    {"qwen_d128_g2_bs7", true, 4, 2, 128, 7, false},
    {"llama_d64_g7_bs16_inter", false, 7, 1, 64, 16, true},
    {"mha_d128_g1_bs16", false, 2, 2, 128, 16, false},
};

TEST(CudaBackend, ForwardPrefillDecodeChunkedMatchesCpu) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    Pair p = make_pair(v, 256, 0);
    const int64_t V = p.cfg.vocab_size;
    int32_t next_block = 0;
    std::vector<Seq> seqs(3);
    const size_t lens[] = {17, 1, 40};
    std::vector<float> lc, lg;
    int agree = 0, total = 0;
    auto step = [&](const ForwardBatch& fb, const std::string& what) {
      p.cpu->forward(fb, lc);
      p.gpu->forward(fb, lg);
      test::record(std::string("forward/") + v.name + "/" + what, test::compare(lg, lc), 2e-2);
      for (size_t r = 0; r < fb.output_tokens.size(); ++r) {
        agree += argmax(&lc[r * V], V) == argmax(&lg[r * V], V);
        ++total;
      }
      // The same forward asking for argmax ids only: exactly the argmax of the GPU's own logits.
      ForwardBatch ab = fb;
      ab.output = ForwardBatch::Output::kArgmax;
      ForwardOutput fo;
      const std::vector<int32_t>& ids = fo.ids;
      p.gpu->forward(ab, fo);
      ASSERT_EQ(ids.size(), fb.output_tokens.size());
      for (size_t r = 0; r < ids.size(); ++r)
        EXPECT_EQ(static_cast<int32_t>(ids[r]), argmax(&lg[r * V], V)) << what << " row " << r;
      // And sampling on the device: the CPU twin's draw on the GPU's own logits.
      ForwardBatch sb = fb;
      sb.output = ForwardBatch::Output::kSample;
      std::mt19937 rng(static_cast<uint32_t>(fb.num_tokens()));
      for (size_t r = 0; r < fb.output_tokens.size(); ++r)
        sb.sampling.push_back({r % 3 == 0 ? 0.0f : 0.8f, static_cast<int32_t>(r % 4) * 5, r % 2 ? 0.9f : 1.0f,
                               std::uniform_real_distribution<float>(0.0f, 0.999f)(rng)});
      p.gpu->forward(sb, fo);
      ASSERT_EQ(ids.size(), fb.output_tokens.size());
      std::vector<int32_t> want(ids.size());
      cpu::sample_rows(lg.data(), static_cast<int64_t>(ids.size()), V, V, sb.sampling.data(), want.data());
      for (size_t r = 0; r < ids.size(); ++r) EXPECT_EQ(static_cast<int32_t>(ids[r]), want[r]) << what << " sampled row " << r;
    };
    // 1. Prefill three prompts in one batch.
    Builder b(v.block_size, &next_block);
    for (size_t s = 0; s < 3; ++s) b.add(seqs[s], random_tokens(lens[s], 50 + s, static_cast<int32_t>(V)));
    step(b.fb, "prefill");
    // 2. Decode 4 steps (teacher-forced with the CPU's greedy tokens so both stay on one path):
    //    two with each decode attention kernel.
    const DecodeAttention kinds[] = {DecodeAttention::kTensorCore, DecodeAttention::kMma, DecodeAttention::kTensorCore,
                                     DecodeAttention::kMma};
    for (int it = 0; it < 4; ++it) {
      p.gpu->set_decode_attention(kinds[it]);
      std::vector<int32_t> next;
      for (size_t s = 0; s < 3; ++s) next.push_back(argmax(&lc[s * V], V));
      Builder d(v.block_size, &next_block);
      for (size_t s = 0; s < 3; ++s) d.add(seqs[s], {next[s]});
      step(d.fb, std::string("decode ") + decode_attention_name(kinds[it]) + " " + std::to_string(it));
    }
    // 3. A mixed batch: a 20-token chunk continuing seq 0, a decode of seq 1, a new 33-token prompt.
    Seq fresh;
    Builder m(v.block_size, &next_block);
    m.add(seqs[0], random_tokens(20, 60, static_cast<int32_t>(V)));
    m.add(seqs[1], {argmax(&lc[V], V)});
    m.add(fresh, random_tokens(33, 61, static_cast<int32_t>(V)));
    step(m.fb, "chunked_mixed");
    // 4. Hidden-state output of every token of a short prompt.
    Seq h;
    Builder hb(v.block_size, &next_block);
    hb.add(h, random_tokens(9, 62, static_cast<int32_t>(V)), false);
    for (int32_t t = 0; t < hb.fb.num_tokens(); ++t) hb.fb.output_tokens.push_back(t);
    hb.fb.output = ForwardBatch::Output::kHidden;
    p.cpu->forward(hb.fb, lc);
    p.gpu->forward(hb.fb, lg);
    test::record(std::string("forward/") + v.name + "/hidden", test::compare(lg, lc), 2e-2);
    test::note(std::string("forward/") + v.name + "/greedy", std::to_string(agree) + "/" + std::to_string(total) +
                                                                   " argmax equal");
    EXPECT_GE(agree * 10, total * 8) << v.name << ": greedy tokens disagree too often";
  }
}

// Chunked RoPE through both backends: capture a fact's pre-RoPE KV, inject it at other positions,
// then answer a question over it.
TEST(CudaBackend, InjectionMatchesCpuAndPrefill) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    Pair p = make_pair(v, 1024, 16);
    const int32_t V = static_cast<int32_t>(p.cfg.vocab_size), bs = v.block_size;
    const std::string tag = std::string("inject/") + v.name;
    int32_t next_block = 0;
    std::vector<float> lc, lg, kc, vc, kg, vg;

    // a. Encode the fact alone (w = 0) at positions 0.., capturing every token into pool slots.
    const CapturedFact cf = capture_fact(p, bs, &next_block, 70, 5, tag + "/pool", 1e-2);
    const std::vector<int32_t>& fact = cf.tokens;
    const std::vector<int64_t>& pool_slots = cf.pool_slots;

    // b. Request: 100-token header prefilled, the fact injected at 100..122, then a question.
    Seq req;
    const InjectBatch inj = header_then_inject(p, req, pool_slots, bs, &next_block, 100, 71, kc, vc, kg, vg);
    const int32_t p0 = inj.positions.front();
    test::record(tag + "/cache_k@100", test::compare(kg, kc), 1e-2);
    test::record(tag + "/cache_v@100", test::compare(vg, vc), 1e-2);
    Builder qb(bs, &next_block);
    qb.add(req, random_tokens(7, 72, V));
    p.cpu->forward(qb.fb, lc);
    p.gpu->forward(qb.fb, lg);
    test::record(tag + "/question_logits", test::compare(lg, lc), 2e-2);

    // b2. Chunked RoPE exactness (DESIGN invariant 1, w = 0): the same fact encoded alone at its
    //     serving position 100 (kv_start = 100: nothing before it) gives the injected K and V.
    {
      Seq alone;
      Builder ab(bs, &next_block);
      ab.add(alone, fact, true, p0);
      ab.fb.kv_start = {p0};
      std::vector<int64_t> at_p0;
      for (int32_t i = 0; i < static_cast<int32_t>(fact.size()); ++i) at_p0.push_back(ab.fb.slot_mapping[static_cast<size_t>(i)]);
      for (Backend* be : {p.cpu.get(), static_cast<Backend*>(p.gpu.get())}) {
        const bool gpu = be != p.cpu.get();
        be->forward(ab.fb, gpu ? lg : lc);
        std::vector<float> ki, vi, ke, ve;
        test::read_cache_f32(*be, inj.dst_slots, ki, vi);
        test::read_cache_f32(*be, at_p0, ke, ve);
        // CPU: f32, only summation order differs; GPU: bf16 activations on two paths.
        test::record(tag + (gpu ? "/gpu" : "/cpu") + "_chunked_rope_k", test::compare(ki, ke), gpu ? 2e-2 : 1e-4);
        test::record(tag + (gpu ? "/gpu" : "/cpu") + "_chunked_rope_v", test::compare(vi, ve), gpu ? 2e-2 : 1e-4);
      }
      test::record(tag + "/fact_at_p_logits", test::compare(lg, lc), 2e-2);
    }

    // c. Far positions (past 8192; llama3 scaling on the llama variants) into scratch slots.
    for (int32_t far : {9000, 70000}) {
      InjectBatch f;
      for (size_t i = 0; i < fact.size(); ++i) {
        f.src_slots.push_back(pool_slots[i]);
        f.dst_slots.push_back(static_cast<int64_t>(900) * bs + static_cast<int64_t>(i));  // blocks 900.. unused
        f.positions.push_back(far + static_cast<int32_t>(i));
      }
      p.cpu->inject(f);
      p.gpu->inject(f);
      test::read_cache_f32(*p.cpu, f.dst_slots, kc, vc);
      test::read_cache_f32(*p.gpu, f.dst_slots, kg, vg);
      test::record(tag + "/cache_k@" + std::to_string(far), test::compare(kg, kc), 1e-2);
    }

    // d. Inject at p == prefill at p: prefill [ctx][fact] capturing the fact, inject the capture
    //    at the same positions elsewhere: equal K (one more bf16 rounding) and identical V.
    Seq ctx;
    Builder cb(bs, &next_block);
    cb.add(ctx, random_tokens(30, 73, V), false);
    std::vector<int64_t> slots2(fact.size());
    std::iota(slots2.begin(), slots2.end(), 60);
    cb.add(ctx, fact, true, 30, slots2);
    // Same sequence: merge the two adds into one (a sequence appears once per batch).
    ForwardBatch one = cb.fb;
    one.q_indptr = {0, one.num_tokens()};
    one.kv_indices = ctx.blocks;
    one.kv_indptr = {0, static_cast<int32_t>(ctx.blocks.size())};
    one.output_tokens = {one.num_tokens() - 1};
    std::vector<int64_t> prefilled;
    for (int32_t i = 30; i < 30 + static_cast<int32_t>(fact.size()); ++i)
      prefilled.push_back(one.slot_mapping[static_cast<size_t>(i)]);
    InjectBatch same;
    for (size_t i = 0; i < fact.size(); ++i) {
      same.src_slots.push_back(slots2[i]);
      same.dst_slots.push_back(static_cast<int64_t>(950) * bs + static_cast<int64_t>(i));
      same.positions.push_back(30 + static_cast<int32_t>(i));
    }
    for (Backend* be : {p.cpu.get(), static_cast<Backend*>(p.gpu.get())}) {
      be->forward(one, lc);
      be->inject(same);
      test::read_cache_f32(*be, prefilled, kc, vc);
      test::read_cache_f32(*be, same.dst_slots, kg, vg);
      const bool gpu = be != p.cpu.get();
      test::record(tag + (gpu ? "/gpu" : "/cpu") + "_inject_eq_prefill_k", test::compare(kg, kc), gpu ? 4e-3 : 1e-6);
      test::record(tag + (gpu ? "/gpu" : "/cpu") + "_inject_eq_prefill_v", test::compare(vg, vc), gpu ? 0.0 : 1e-7);
    }
  }
}

// The FP8 KV cache through whole forwards against the CPU's f32 cache: a prefill of three
// prompts, decode steps on each decode kernel, a captured fact injected after a header, and a
// question over it. The cache reads back as the CPU's rows through E4M3 (bf16 activations flip
// codes: ~3% rel. L2 of the rows, a flip being one E4M3 step), and logits stay within FP8's rounding (bounds looser than bf16's 2e-2; the quality cost is measured on real
// models, docs/QUALITY.md).
TEST(CudaBackend, Fp8CacheMatchesCpuWithinItsRounding) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    Pair p = make_pair(v, 512, 16, /*gpu_cache_fp8=*/true);
    const int32_t V = static_cast<int32_t>(p.cfg.vocab_size), bs = v.block_size;
    const int64_t D = p.cfg.head_dim;
    const std::string tag = std::string("fp8_cache/") + v.name;
    int32_t next_block = 0;
    std::vector<float> kc, vc, kg, vg;
    SideBySide sbs{*p.cpu, *p.gpu, tag, V, 1e-1};
    const std::vector<float>& lc = sbs.lr;
    auto step = [&](const ForwardBatch& fb, const std::string& what) { sbs.step(fb, what); };
    std::vector<Seq> seqs(3);
    Builder b(bs, &next_block);
    sbs.prefill_three(seqs, b);
    std::vector<int64_t> slots;  // the 40-token prompt's cache rows
    for (int32_t t = 18; t < b.fb.num_tokens(); ++t) slots.push_back(b.fb.slot_mapping[static_cast<size_t>(t)]);
    test::read_cache_f32(*p.cpu, slots, kc, vc);
    test::read_cache_f32(*p.gpu, slots, kg, vg);
    test::record(tag + "/cache_k", test::compare(kg, test::fp8_rounded(kc, D)), 5e-2);
    test::record(tag + "/cache_v", test::compare(vg, test::fp8_rounded(vc, D)), 5e-2);
    // Decode steps on each kind.
    const DecodeAttention kinds[] = {DecodeAttention::kTensorCore, DecodeAttention::kMma};
    for (int it = 0; it < 2; ++it) {
      p.gpu->set_decode_attention(kinds[it]);
      std::vector<int32_t> next;
      for (size_t s = 0; s < 3; ++s) next.push_back(argmax(&lc[s * V], V));
      Builder d(bs, &next_block);
      for (size_t s = 0; s < 3; ++s) d.add(seqs[s], {next[s]});
      step(d.fb, std::string("decode ") + decode_attention_name(kinds[it]));
    }
    p.gpu->set_decode_attention(kDefaultDecodeAttention);

    // A fact captured into the (bf16) pool, injected after a 60-token header, then a question.
    const auto fact = random_tokens(23, 90, V);
    std::vector<int64_t> pool_slots(fact.size());
    std::iota(pool_slots.begin(), pool_slots.end(), 3);
    Seq enc, req;
    Builder eb(bs, &next_block);
    eb.add(enc, fact, true, -1, pool_slots);
    step(eb.fb, "encode");
    header_then_inject(p, req, pool_slots, bs, &next_block, 60, 91, kc, vc, kg, vg);
    test::record(tag + "/injected_k", test::compare(kg, test::fp8_rounded(kc, D)), 5e-2);
    test::record(tag + "/injected_v", test::compare(vg, test::fp8_rounded(vc, D)), 5e-2);
    Builder qb(bs, &next_block);
    qb.add(req, random_tokens(7, 92, V));
    step(qb.fb, "question");
    // Random weights give near-flat logits, and FP8's rounding (rel_l2 ~4e-2) moves some argmaxes:
    // llama_d64_g7 disagrees on 4 of its 11 rows (H100), the same 4 rows as before the CUDA-core
    // decode step (3 more rows, all agreeing) left the test. The logits' bound above is the check;
    // this one catches a wholesale failure.
    sbs.expect_mostly_agree(v.name, 6);
  }
}

// The FP8 memory pool against the CPU's FP8 pool (its twin): a fact captured into it (codes from
// bf16 activations against f32 ones: within FP8's rounding); the CPU's rows written into the
// GPU's pool read back bit for bit (codes and scales, quantized on the host by tensor/fp8.h); and
// injection from those identical pools into a bf16 cache (the CPU's f32 rows to bf16's rounding)
// and into an FP8 cache (to FP8's), then a question over the injected fact.
TEST(CudaBackend, Fp8PoolMatchesCpuFp8Pool) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    for (const bool cache_fp8 : {false, true}) {
      Pair p = make_pair(v, 512, 16, cache_fp8, /*pool_fp8=*/true);
      EXPECT_EQ(p.gpu->pool_dtype(), DType::kF32);
      const int32_t V = static_cast<int32_t>(p.cfg.vocab_size), bs = v.block_size;
      const int64_t D = p.cfg.head_dim;
      const std::string tag = std::string("fp8_pool/") + v.name + (cache_fp8 ? "/fp8_cache" : "/bf16_cache");
      int32_t next_block = 0;
      std::vector<float> lc, lg, kc, vc, kg, vg;

      const CapturedFact cf = capture_fact(p, bs, &next_block, 95, 7, tag + "/captured", 5e-2);
      const std::vector<int64_t>& pool_slots = cf.pool_slots;

      test::write_pool_f32(*p.gpu, pool_slots, cf.cpu_k, cf.cpu_v);
      test::read_pool_f32(*p.gpu, pool_slots, kg, vg);
      test::record(tag + "/written_k", test::compare(kg, cf.cpu_k), 0.0);
      test::record(tag + "/written_v", test::compare(vg, cf.cpu_v), 0.0);

      Seq req;
      header_then_inject(p, req, pool_slots, bs, &next_block, 60, 96, kc, vc, kg, vg);
      if (cache_fp8) {
        test::record(tag + "/injected_k", test::compare(kg, test::fp8_rounded(kc, D)), 5e-2);
        test::record(tag + "/injected_v", test::compare(vg, test::fp8_rounded(vc, D)), 1e-5);  // the same codes
      } else {
        test::record(tag + "/injected_k", test::compare(kg, kc), 1e-2);
        test::record(tag + "/injected_v", test::compare(vg, vc), 4e-3);  // bf16 of the same values
      }
      Builder qb(bs, &next_block);
      qb.add(req, random_tokens(7, 97, V));
      p.cpu->forward(qb.fb, lc);
      p.gpu->forward(qb.fb, lg);
      test::record(tag + "/question_logits", test::compare(lg, lc), cache_fp8 ? 1e-1 : 2e-2);
    }
  }
}

// The engine's capture work (memory_connector.h) shares forwards with decodes: a fact captured in a
// batch beside other sequences' decode tokens (kArgmax rows for those only) writes the pool as a
// capture-only forward does, and the decode rows' ids equal a decode-only forward's; on both
// backends, the GPU against the CPU too.
TEST(CudaBackend, CaptureBesideDecodesInOneForward) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    Pair p = make_pair(v, 1024, 16);
    const int32_t V = static_cast<int32_t>(p.cfg.vocab_size), bs = v.block_size;
    const std::string tag = std::string("capture_mixed/") + v.name;
    const auto window = random_tokens(9, 80, V), fact = random_tokens(19, 81, V);
    std::vector<int32_t> seq = window;
    seq.insert(seq.end(), fact.begin(), fact.end());
    std::vector<int64_t> alone_slots(seq.size(), -1), mixed_slots(seq.size(), -1);
    for (size_t i = window.size(); i < seq.size(); ++i) {
      alone_slots[i] = static_cast<int64_t>(i - window.size());
      mixed_slots[i] = static_cast<int64_t>(i - window.size()) + 5 * bs;  // entries of their own
    }
    // As the engine builds it: only the kept tokens (slot >= 0) are capture tokens.
    auto only_kept = [](ForwardBatch& fb) {
      std::vector<int32_t> t;
      std::vector<int64_t> sl;
      for (size_t i = 0; i < fb.capture_tokens.size(); ++i)
        if (fb.capture_slots[i] >= 0) {
          t.push_back(fb.capture_tokens[i]);
          sl.push_back(fb.capture_slots[i]);
        }
      fb.capture_tokens = std::move(t);
      fb.capture_slots = std::move(sl);
    };
    std::vector<float> ka_c, va_c;
    for (Backend* be : {p.cpu.get(), static_cast<Backend*>(p.gpu.get())}) {
      const bool gpu = be != p.cpu.get();
      int32_t next_block = 0;
      // Two requests with their prompts in the cache.
      Seq r1, r2;
      Builder pre(bs, &next_block);
      pre.add(r1, random_tokens(37, 82, V), false);
      pre.add(r2, random_tokens(5, 83, V), false);
      std::vector<float> ignore;
      be->forward(pre.fb, ignore);
      const int32_t d1 = 11, d2 = 12;
      // Decode-only.
      Seq r1a = r1, r2a = r2;
      Builder dec(bs, &next_block);
      dec.add(r1a, {d1});
      dec.add(r2a, {d2});
      dec.fb.output = ForwardBatch::Output::kArgmax;
      ForwardOutput want;
      be->forward(dec.fb, want);
      // Capture-only: the [window][fact] sequence, no output row.
      Seq c1;
      Builder cap(bs, &next_block);
      cap.add(c1, seq, false, -1, alone_slots);
      cap.fb.output = ForwardBatch::Output::kHidden;
      only_kept(cap.fb);
      be->forward(cap.fb, ignore);
      // Mixed: decode, capture, decode in one forward (the same decode tokens again: idempotent).
      Seq r1b = r1, r2b = r2, c2;
      Builder mix(bs, &next_block);
      mix.add(r1b, {d1});
      mix.add(c2, seq, false, -1, mixed_slots);
      mix.add(r2b, {d2});
      mix.fb.output = ForwardBatch::Output::kArgmax;
      only_kept(mix.fb);
      ForwardOutput got;
      be->forward(mix.fb, got);
      EXPECT_EQ(got.ids, want.ids) << tag << (gpu ? " gpu" : " cpu");
      std::vector<int64_t> a(alone_slots.begin() + static_cast<long>(window.size()), alone_slots.end());
      std::vector<int64_t> m(mixed_slots.begin() + static_cast<long>(window.size()), mixed_slots.end());
      std::vector<float> ka, va, km, vm;
      test::read_pool_f32(*be, a, ka, va);
      test::read_pool_f32(*be, m, km, vm);
      // bf16 activations: another batch composition may round differently on the GPU.
      test::record(tag + (gpu ? "/gpu" : "/cpu") + "_mixed_eq_alone_k", test::compare(km, ka), gpu ? 1e-2 : 1e-5);
      test::record(tag + (gpu ? "/gpu" : "/cpu") + "_mixed_eq_alone_v", test::compare(vm, va), gpu ? 1e-2 : 1e-5);
      if (!gpu) {
        ka_c = ka;
        va_c = va;
      } else {
        test::record(tag + "/gpu_vs_cpu_k", test::compare(km, ka_c), 1e-2);
        test::record(tag + "/gpu_vs_cpu_v", test::compare(vm, va_c), 1e-2);
      }
    }
  }
}

// Runs `fb` three times through the graph path: a warm-up (or replay), a capture (or replay), a
// replay; all three give the same numbers (returned in g1). A step rerun is idempotent: it
// rewrites its own K/V.
GraphStats run_graphed(CudaBackend& be, const ForwardBatch& fb, ForwardOutput& g1, const std::string& what) {
  ForwardOutput g2, g3;
  be.set_cuda_graphs(true);
  const GraphStats before = be.graph_stats();
  be.forward(fb, g1);
  be.forward(fb, g2);
  be.forward(fb, g3);
  const GraphStats after = be.graph_stats();
  EXPECT_GE(after.replays - before.replays, 2) << what << ": the second run captures and launches, the third replays";
  for (const ForwardOutput* g : {&g2, &g3}) {
    const test::Err e = test::compare(g->values, g1.values);
    EXPECT_LE(e.max_abs, 1e-6 * std::max(1.0, e.max_ref)) << what;
    EXPECT_EQ(g->ids, g1.ids) << what;
  }
  return after;
}

// The kArgmax and kSample graphs of `fb` give the argmax of, and the CPU twin's draws (with
// `sampling`) from, `logits`: the rows of fb's kLogits graph.
void check_graphed_ids(CudaBackend& be, const ForwardBatch& fb, const std::vector<float>& logits, int64_t V,
                       const std::vector<RowSampling>& sampling, const std::string& what) {
  const size_t n = fb.output_tokens.size();
  ForwardOutput out;
  const std::vector<int32_t>& ids = out.ids;
  ForwardBatch ab = fb;
  ab.output = ForwardBatch::Output::kArgmax;
  run_graphed(be, ab, out, what + "/argmax");
  ASSERT_EQ(ids.size(), n);
  for (size_t r = 0; r < n; ++r) EXPECT_EQ(ids[r], argmax(&logits[r * V], V)) << what << " row " << r;
  ForwardBatch sb = fb;
  sb.output = ForwardBatch::Output::kSample;
  sb.sampling = sampling;
  run_graphed(be, sb, out, what + "/sample");
  std::vector<int32_t> want(n);
  cpu::sample_rows(logits.data(), static_cast<int64_t>(n), V, V, sampling.data(), want.data());
  ASSERT_EQ(ids.size(), n);
  for (size_t r = 0; r < n; ++r) EXPECT_EQ(ids[r], want[r]) << what << " sampled row " << r;
}

// A forward in two halves (Backend::launch_forward) is the forward: launched, polled while it
// runs, then waited for, it gives exactly forward()'s output (logits, and argmax ids through a
// graph); any other call while one is pending (a cache read, another launch, the GPU time)
// completes it first, its output whole; a wait with nothing pending does nothing.
TEST(CudaBackend, LaunchedForwardEqualsForward) {
  REQUIRE_GPU();
  const Variant& v = kVariants[0];
  Pair p = make_pair(v, 256, 0);
  CudaBackend& be = *p.gpu;
  EXPECT_TRUE(be.overlaps_forward());
  const int32_t V = static_cast<int32_t>(p.cfg.vocab_size);
  int32_t next_block = 0;
  Seq a, b;
  Builder pre(v.block_size, &next_block);
  pre.add(a, random_tokens(333, 5, V));
  pre.add(b, random_tokens(77, 6, V));
  // The same batch again writes the same KV: its output is the same each time.
  std::vector<float> want;
  be.forward(pre.fb, want);
  ForwardOutput got;
  be.launch_forward(pre.fb, got);
  EXPECT_TRUE(got.values.empty()) << "nothing is filled before the wait";
  int polls = 0;
  while (be.forward_running() && polls < 1000000) ++polls;
  be.wait_forward();
  EXPECT_EQ(got.values, want) << "launched and waited for == forward()";
  test::note("launch/polls_while_running", std::to_string(polls));
  be.wait_forward();  // nothing pending
  EXPECT_EQ(got.values, want);

  // A cache read while a forward is pending waits for it (and reads what it wrote).
  ForwardOutput pending;
  be.launch_forward(pre.fb, pending);
  HostTensor k, v_rows;
  be.read_cache({0, 1, 2}, k, v_rows);
  EXPECT_EQ(pending.values, want) << "the read completed the forward first";
  EXPECT_FALSE(be.forward_running());
  // Two launched forwards are both pending; a third completes the oldest first; the waits
  // complete them in launch order; the GPU time waits for all.
  ForwardOutput first, second, third;
  be.launch_forward(pre.fb, first);
  be.launch_forward(pre.fb, second);
  EXPECT_TRUE(first.values.empty() && second.values.empty()) << "two forwards pending";
  be.launch_forward(pre.fb, third);
  EXPECT_EQ(first.values, want) << "the third launch completed the first";
  EXPECT_TRUE(second.values.empty());
  be.wait_forward();
  EXPECT_EQ(second.values, want);
  EXPECT_TRUE(third.values.empty());
  EXPECT_GT(be.last_gpu_ms(), 0.0f);
  EXPECT_EQ(third.values, want);

  // A decode step through its graph, argmax ids: launched == forward().
  Builder d(v.block_size, &next_block);
  d.add(a, random_tokens(1, 7, V));
  d.add(b, random_tokens(1, 8, V));
  d.fb.output = ForwardBatch::Output::kArgmax;
  d.fb.argmax_vocab = V;
  ForwardOutput ids_want, ids_got;
  for (int i = 0; i < 4; ++i) be.forward(d.fb, ids_want);  // warm-up, capture, replays
  be.launch_forward(d.fb, ids_got);
  be.wait_forward();
  EXPECT_EQ(ids_got.ids, ids_want.ids);
  EXPECT_EQ(ids_got.ids.size(), 2u);
  EXPECT_GT(be.graph_stats().replays, 0);
}

// CUDA graphs (graph_batch.h): a decode step replayed from its bucket's graph equals the same step
// run eagerly, through warm-up, capture and replays, with split-KV plans that change between
// replays, both decode attention kernels, every output kind, and a recapture after a bigger bucket
// moved the graph workspace.
TEST(CudaBackend, GraphReplayEqualsEager) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    Pair p = make_pair(v, 1024, 0);
    const int64_t V = p.cfg.vocab_size;
    const std::string tag = std::string("graph/") + v.name;
    int32_t next_block = 0;
    std::vector<Seq> seqs(20);
    Builder pre(v.block_size, &next_block);
    for (size_t s = 0; s < seqs.size(); ++s)
      pre.add(seqs[s], random_tokens(1 + (s * 37) % 300, 70 + s, static_cast<int32_t>(V)));
    std::vector<float> eager;
    ForwardOutput g1;
    p.gpu->forward(pre.fb, eager);  // several sequences' prompts: eager whatever the setting
    std::vector<ForwardBatch> steps;
    for (const DecodeAttention kind :
         {DecodeAttention::kTensorCore, DecodeAttention::kMma, DecodeAttention::kAuto}) {
      p.gpu->set_decode_attention(kind);
      const std::string k = decode_attention_name(kind);
      for (const size_t n : {1u, 3u, 5u, 13u, 20u}) {  // buckets 1, 4, 8, 16, 24
        Builder d(v.block_size, &next_block);
        for (size_t s = 0; s < n; ++s) d.add(seqs[s], random_tokens(1, 90 + s + n, static_cast<int32_t>(V)));
        steps.push_back(d.fb);
        const std::string what = tag + "/" + k + "/n" + std::to_string(n);
        p.gpu->set_cuda_graphs(false);
        p.gpu->forward(d.fb, eager);
        run_graphed(*p.gpu, d.fb, g1, what + "/logits");
        test::record(what + "/logits", test::compare(g1.values, eager), 5e-3);
        std::vector<RowSampling> sampling;
        for (size_t r = 0; r < n; ++r)
          sampling.push_back({r % 3 == 0 ? 0.0f : 0.8f, static_cast<int32_t>(r % 4) * 5, r % 2 ? 0.9f : 1.0f,
                              static_cast<float>((r * 0.37 + n * 0.11) - std::floor(r * 0.37 + n * 0.11))});
        check_graphed_ids(*p.gpu, d.fb, std::vector<float>(g1.values), V, sampling, what);
      }
    }
    // The first step again (its positions are older; nothing it reads changed): bucket 24 grew the
    // graph workspace since, so bucket 1 warms up and captures again, with the same numbers.
    p.gpu->set_decode_attention(DecodeAttention::kTensorCore);
    p.gpu->set_cuda_graphs(false);
    p.gpu->forward(steps.front(), eager);
    const GraphStats before = p.gpu->graph_stats();
    const GraphStats after = run_graphed(*p.gpu, steps.front(), g1, tag + "/regrown");
    EXPECT_EQ(after.eager_warmups - before.eager_warmups, 1) << "a moved workspace is warmed up again";
    EXPECT_EQ(after.captures - before.captures, 1);
    test::record(tag + "/regrown", test::compare(g1.values, eager), 5e-3);
    test::note(tag + "/stats", std::to_string(after.eager_warmups) + " warm-ups, " + std::to_string(after.captures) +
                                   " captures, " + std::to_string(after.replays) + " replays");
  }
}

// Short one-sequence prefills (a question after a cached prefix) replayed from their bucket's
// graph equal the eager forward, for chunk lengths inside one bucket and across several, and for
// sampled and greedy outputs.
TEST(CudaBackend, PrefillGraphReplayEqualsEager) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    Pair p = make_pair(v, 1024, 0);
    const int64_t V = p.cfg.vocab_size;
    const std::string tag = std::string("graph_prefill/") + v.name;
    int32_t next_block = 0;
    Seq seq;
    std::vector<float> eager, cpu;
    ForwardOutput g1;
    Builder prefix(v.block_size, &next_block);  // 300 tokens: past the buckets, eager
    prefix.add(seq, random_tokens(300, 399, static_cast<int32_t>(V)));
    p.cpu->forward(prefix.fb, cpu);
    p.gpu->forward(prefix.fb, eager);
    for (const int32_t n : {2, 13, 16, 20, 30, 45, 100, 256}) {
      Builder b(v.block_size, &next_block);
      b.add(seq, random_tokens(static_cast<size_t>(n), 400 + n, static_cast<int32_t>(V)));
      const std::string what = tag + "/n" + std::to_string(n);
      p.gpu->set_cuda_graphs(false);
      p.gpu->forward(b.fb, eager);
      p.cpu->forward(b.fb, cpu);
      run_graphed(*p.gpu, b.fb, g1, what);
      test::record(what + "/vs_eager", test::compare(g1.values, eager), 5e-3);
      test::record(what + "/vs_cpu", test::compare(g1.values, cpu), 2e-2);
      check_graphed_ids(*p.gpu, b.fb, std::vector<float>(g1.values), V, {{0.8f, 7, 0.9f, 0.375f}}, what);
    }
    const GraphStats st = p.gpu->graph_stats();
    EXPECT_GE(st.captures, 3) << "buckets 16, 32, 48, 128 and 256 were captured";
  }
}

// Programmatic Dependent Launch (launch.cuh) changes when kernels start, never what they compute:
// prefills and decode steps, eager and graphed, give the same bits with it on and off. The model
// is wide enough (hidden 1024, intermediate 2816) that the GEMV's prefetch and double-buffered
// loop run, at batch 1 and 3; the KV each forward writes is the same both times.
TEST(CudaBackend, ProgrammaticLaunchChangesNoBits) {
  REQUIRE_GPU();
  ModelConfig c = tiny_config(kVariants[1]);  // Qwen3-style: bias, qk-norm, tied embeddings
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.num_layers = 4;
  c.vocab_size = 5003;
  BackendOptions o;
  o.block_size = 16;
  o.num_cache_blocks = 256;
  auto gpu = make_cuda_backend_random(c, 77, o);
  int32_t next_block = 0;
  std::vector<Seq> seqs(3);
  const auto both = [&](const ForwardBatch& fb, const std::string& what) {
    std::vector<float> on, off;
    gpu->set_programmatic_launch(false);
    gpu->forward(fb, off);
    gpu->set_programmatic_launch(true);
    gpu->forward(fb, on);
    ASSERT_EQ(on.size(), off.size()) << what;
    EXPECT_TRUE(std::equal(on.begin(), on.end(), off.begin())) << what << ": PDL on and off differ";
    test::record("pdl/" + what, test::compare(on, off), 0.0);
  };
  Builder pre(o.block_size, &next_block);
  for (size_t s = 0; s < seqs.size(); ++s) pre.add(seqs[s], random_tokens(40 + 97 * s, 300 + s, 5003));
  both(pre.fb, "prefill");
  for (const bool graphs : {false, true}) {
    gpu->set_cuda_graphs(graphs);
    for (const size_t n : {1u, 3u}) {
      for (int step = 0; step < 3; ++step) {  // graphed: warm-up, capture, replay
        Builder d(o.block_size, &next_block);
        for (size_t s = 0; s < n; ++s) d.add(seqs[s], random_tokens(1, 400 + s + 10 * step + n, 5003));
        both(d.fb, std::string(graphs ? "graph" : "eager") + "/n" + std::to_string(n) + "/step" + std::to_string(step));
      }
    }
  }
}

// The per-op profile (op_profile.h) of eager forwards: every op of the forward is there with its
// call count, and the intervals add up to the forward's own GPU time (they tile it from the upload
// to the stop event). Graphed forwards add nothing.
// A mixed batch (prefill chunks beside decodes) runs its decode sequences on the decode kernel and
// the others on the tiles, two launches over disjoint rows: with each decode kind it equals the
// CPU and the same batch on the tiles alone, bf16 and FP8 caches, long contexts split and merged.
TEST(CudaBackend, MixedBatchDecodesRunTheDecodeKernel) {
  REQUIRE_GPU();
  for (const Variant& v : kVariants) {
    for (const bool fp8 : {false, true}) {
      Pair p = make_pair(v, 512, 0, fp8);
      const int32_t V = static_cast<int32_t>(p.cfg.vocab_size);
      const std::string tag = std::string("mixed/") + v.name + (fp8 ? "/fp8" : "");
      int32_t next_block = 0;
      std::vector<Seq> seqs(5);
      const size_t lens[] = {700, 1, 17, 40, 300};
      Builder pre(v.block_size, &next_block);
      for (size_t s = 0; s < 5; ++s) pre.add(seqs[s], random_tokens(lens[s], 70 + s, V));
      std::vector<float> lc, lg, lt;
      p.cpu->forward(pre.fb, lc);
      p.gpu->forward(pre.fb, lg);
      // Decodes of sequences 0-3, a 20-token chunk continuing sequence 4, a new 33-token prompt.
      Seq fresh;
      Builder m(v.block_size, &next_block);
      for (size_t s = 0; s < 4; ++s) m.add(seqs[s], {argmax(&lc[s * V], V)});
      m.add(seqs[4], random_tokens(20, 80, V));
      m.add(fresh, random_tokens(33, 81, V));
      p.cpu->forward(m.fb, lc);
      const double tol = fp8 ? 1e-1 : 2e-2;  // the CPU's cache is f32
      p.gpu->set_cuda_graphs(false);
      p.gpu->set_op_profile(true);
      // The tiles for every sequence (kTensorCore: no decode kernel, so no split) as the reference.
      p.gpu->set_decode_attention(DecodeAttention::kTensorCore);
      p.gpu->forward(m.fb, lt);
      test::record(tag + "/tiles_vs_cpu", test::compare(lt, lc), tol);
      const auto split_launches = [&] {
        int64_t n = 0;
        for (const OpTime& t : p.gpu->op_profile()) n += t.op == "attention, mixed step's decodes" ? t.calls : 0;
        return n;
      };
      EXPECT_EQ(split_launches(), 0) << tag;
      // kAuto and kMma: the decodes on the decode kernel beside the tiles on a second stream. Both
      // pick kMma for these 4 decodes, so the two forwards launch the same kernels on the same
      // data: the same bits, whatever the two streams' timing.
      std::vector<float> first;
      for (const DecodeAttention kind : {DecodeAttention::kAuto, DecodeAttention::kMma}) {
        p.gpu->set_op_profile(true);
        p.gpu->set_decode_attention(kind);
        p.gpu->forward(m.fb, lg);
        EXPECT_EQ(split_launches(), p.cfg.num_layers) << tag << " " << decode_attention_name(kind);
        const std::string k = tag + "/split/" + decode_attention_name(kind);
        test::record(k + "/vs_cpu", test::compare(lg, lc), tol);
        test::record(k + "/vs_tiles", test::compare(lg, lt), fp8 ? 5e-2 : 2e-2);
        if (first.empty()) {
          first = lg;
        } else {
          ASSERT_EQ(lg.size(), first.size());
          EXPECT_EQ(0, std::memcmp(lg.data(), first.data(), lg.size() * sizeof(float))) << tag << ": two split forwards differ";
        }
      }
      p.gpu->set_op_profile(false);
      p.gpu->set_decode_attention(kDefaultDecodeAttention);
    }
  }
}

TEST(CudaBackend, OpProfileTilesTheForward) {
  REQUIRE_GPU();
  const Variant& v = kVariants[0];
  Pair p = make_pair(v, 256, 0);
  const int64_t L = p.cfg.num_layers;
  int32_t next_block = 0;
  Seq seq;
  Builder pre(v.block_size, &next_block);
  pre.add(seq, random_tokens(37, 5, 1000));
  std::vector<float> logits;
  p.gpu->set_cuda_graphs(false);
  p.gpu->set_op_profile(true);
  p.gpu->forward(pre.fb, logits);
  const double gpu_ms = p.gpu->last_gpu_ms();
  const std::vector<OpTime> ops = p.gpu->op_profile();
  double sum = 0;
  int64_t calls = 0;
  const auto count = [&](const std::string& op) {
    for (const OpTime& t : ops)
      if (t.op == op) return t.calls;
    return int64_t{0};
  };
  for (const OpTime& t : ops) {
    sum += t.ms;
    calls += t.calls;
    EXPECT_GE(t.ms, 0.0) << t.op;
  }
  EXPECT_EQ(count("upload"), 1);
  EXPECT_EQ(count("embedding"), 1);
  EXPECT_EQ(count("rms_norm"), 2 * L + 1);  // two a layer, the final norm
  EXPECT_EQ(count("attention"), L);
  EXPECT_EQ(count("silu_mul"), L);
  EXPECT_EQ(count("linear " + std::to_string(p.cfg.q_size() + 2 * p.cfg.kv_size()) + "x" +
                  std::to_string(p.cfg.hidden_size)),
            L);
  EXPECT_EQ(calls, 1 + 1 + (2 * L + 1) + 4 * L + L + L + L + 1);  // + the LM head
  EXPECT_LE(sum, gpu_ms * 1.001 + 1e-3) << "the intervals lie inside the forward";
  EXPECT_GE(sum, gpu_ms * 0.5) << "the intervals tile the forward";
  // Graphed decode steps are not profiled.
  p.gpu->set_cuda_graphs(true);
  p.gpu->set_op_profile(true);
  for (int step = 0; step < 3; ++step) {
    Builder d(v.block_size, &next_block);
    d.add(seq, random_tokens(1, 50 + step, 1000));
    p.gpu->forward(d.fb, logits);
  }
  EXPECT_TRUE(p.gpu->op_profile().empty());
  p.gpu->set_op_profile(false);
}

// FP8 projections (--quantization fp8) against the same model's bf16 GPU backend: prefills of
// several sequences, decode steps of 1-3 rows and a question after a prefix (W8A8 throughout: x
// quantized per forward, cuBLASLt's FP8 GEMM), within FP8's rounding, greedy tokens mostly
// the same; the projections take about half their bf16 bytes; a graphed decode step and a
// graphed short prefill (the quantization scratch inside the graph) replay what they captured.
TEST(CudaBackend, Fp8ProjectionsFollowBf16) {
  REQUIRE_GPU();
  for (const Variant& v : {kVariants[0], kVariants[1]}) {
    const ModelConfig cfg = tiny_config(v);
    const ModelWeights w = tiny_weights(cfg, 1234);
    BackendOptions o;
    o.block_size = v.block_size;
    o.num_cache_blocks = 512;
    auto ref = make_cuda_backend(cfg, w, o);
    o.projections_fp8 = true;
    auto fp8 = make_cuda_backend(cfg, w, o);
    const int64_t H = cfg.hidden_size, I = cfg.intermediate_size;
    const int64_t proj = cfg.num_layers * ((cfg.q_size() + 2 * cfg.kv_size()) * H + H * cfg.q_size() + 3 * I * H);
    EXPECT_EQ(ref->weight_bytes() - fp8->weight_bytes(), proj - 4 * 4 * cfg.num_layers)
        << "projections: 1 byte a value, not 2, and a 4-byte scale each";
    const int32_t V = static_cast<int32_t>(cfg.vocab_size), bs = v.block_size;
    const std::string tag = std::string("fp8_projections/") + v.name;
    int32_t next_block = 0;
    SideBySide sbs{*ref, *fp8, tag, V, 1e-1};
    const std::vector<float>&lr = sbs.lr, &lf = sbs.lg;
    auto step = [&](const ForwardBatch& fb, const std::string& what) {
      ref->set_cuda_graphs(false);  // eager here; the graphs are checked against it below
      fp8->set_cuda_graphs(false);
      sbs.step(fb, what);
    };
    std::vector<Seq> seqs(3);
    Builder b(bs, &next_block);
    sbs.prefill_three(seqs, b);  // several sequences: eager
    for (size_t n : {3u, 1u, 2u}) {
      std::vector<int32_t> next;
      for (size_t s = 0; s < n; ++s) next.push_back(argmax(&lr[s * V], V));
      Builder d(bs, &next_block);
      for (size_t s = 0; s < n; ++s) d.add(seqs[s], {next[s]});
      step(d.fb, "decode_n" + std::to_string(n));
      // The same step again through its graph (it rewrites the same KV): what eager gave, where
      // the bucket is the batch; padding rows (3 -> bucket 4) share x's one FP8 scale.
      ForwardOutput g;
      run_graphed(*fp8, d.fb, g, tag + "/graph_decode_n" + std::to_string(n));
      const bool padded = graph_shape(d.fb).bucket != static_cast<int32_t>(n);
      test::record(tag + "/graph_decode_n" + std::to_string(n), test::compare(g.values, lf), padded ? 5e-2 : 1e-6);
    }
    Builder q(bs, &next_block);
    q.add(seqs[2], random_tokens(20, 93, V));
    step(q.fb, "question");
    ForwardOutput g;
    run_graphed(*fp8, q.fb, g, tag + "/graph_question");
    // A graph's batch is padded to its bucket, and the padding's rows share x's one FP8 scale.
    test::record(tag + "/graph_question", test::compare(g.values, lf), 5e-2);
    // This random model's logits are close together (1,000 of them, none dominant): FP8's ~8%
    // relative error on them (weights and x rounded, three layers) flips 40% of the argmax on the
    // H100; the real model's cost is measured in CudaSmolLM2.Fp8ProjectionsStayCloseToBf16.
    sbs.expect_mostly_agree(v.name, 5);
  }
}

}  // namespace
// Facts read in place by the prefill tiles (keys rotated in shared memory with injection's
// rope_pair) against facts injected into the cache, at odd fact lengths after an odd prefix, GQA
// 1/4/7, head_dim 64/128: the prefill's logits are the copy path's (the same kernel reads the same
// bf16 keys), the decode step's within bf16 rounding (it replays a graph on the copy path, runs
// eagerly in place).
TEST(CudaBackend, FactsReadInPlaceEqualFactsCopied) {
  REQUIRE_GPU();
  using namespace facts_test;
  for (const Shape s : kShapes) {
    const ModelConfig c = config(s);
    const ModelWeights w = make_random_weights(c, 3);
    auto be = make_cuda_backend(c, w, backend_options());
    ASSERT_TRUE(be->reads_facts_in_place());
    const PathDiff d = compare_paths(*be);
    const std::string what = "group " + std::to_string(s.heads / s.kv_heads) + ", head_dim " + std::to_string(s.head_dim);
    EXPECT_LE(d.prefill, 1e-6f) << what;
    EXPECT_LE(d.decode, 2e-2f) << what;
    test::note("facts in place vs copied, max |logit diff| prefill / decode, " + what,
               std::to_string(d.prefill) + " / " + std::to_string(d.decode));
  }
  BackendOptions fp8;
  fp8.num_cache_blocks = 8;
  fp8.num_pool_blocks = 4;
  fp8.cache_fp8 = true;
  EXPECT_FALSE(make_cuda_backend(config({4, 2, 64}), make_random_weights(config({4, 2, 64}), 3), fp8)->reads_facts_in_place())
      << "an FP8 cache copies";
}

}  // namespace inferscale
