// The cases of the op-level parity suite (op_parity.h): each op of ForwardOps at odd shapes and in
// each of its modes. A new op, or a new mode of one, is a new add() here.
#include <fmt/format.h>

#include "model/forward_batch.h"
#include "model/sampling.h"
#include "op_parity.h"

namespace inferscale::test {
namespace {

// Tolerances (relative L2; test::record's rule):
constexpr double kExact = 1e-7;  // ids, copies and f32 lookups of bf16 values
constexpr double kF32 = 1e-5;    // f32 outputs: only the summation order differs
constexpr double kBf16 = 5e-3;   // outputs the GPU keeps in bf16 (kCompute, the bf16 cache and pool)
constexpr double kAttn = 1e-2;   // attention: q, K and V in bf16 on the GPU, its output bf16
constexpr double kFp8Attn = 4e-2;

// Activation slots of the cases (any distinct numbers below the backends' scratch).
enum Slot { kX = 0, kY, kW2, kQkv, kQ, kOut, kGu, kIds };

// Three sequences of odd lengths, one continuing a cached prefix: 5 + 1 + 27 = 33 tokens.
const std::vector<SeqSpan> kThree = {{0, 5}, {0, 1}, {9, 27}};

const char* type_name(ActType t) { return t == ActType::kF32 ? "f32" : "bf16"; }

class Cases {
 public:
  void add(std::string name, OpShape shape, std::function<void(OpRun&)> run) {
    all.push_back({std::move(name), shape, std::move(run)});
  }
  std::vector<OpCase> all;
};

void embed_cases(Cases& c) {
  for (int64_t H : {64, 200})
    c.add(fmt::format("embed/token_ids_H{}", H), {.hidden = H, .vocab = 301}, [H](OpRun& r) {
      const ForwardBatch& b = r.begin(paged_batch(kThree, 301));
      const Weight table = r.matrix(301, H, 1, 1.0f);
      const Act x = r.output(kX, b.num_tokens(), H, ActType::kF32);
      r.ops().embed(table, EmbedIndex::kTokenIds, x, false);
      r.out("x", x, kExact);
    });
  c.add("embed/positions_accumulated", {.vocab = 301}, [](OpRun& r) {
    const ForwardBatch& b = r.begin(paged_batch(kThree, 301));
    const Weight table = r.matrix(64, 64, 1, 1.0f);
    const Act x = r.input(kX, b.num_tokens(), 64, ActType::kF32, 2);
    r.ops().embed(table, EmbedIndex::kPositions, x, true);
    r.out("x", x, kExact);
  });
}

void norm_cases(Cases& c) {
  for (int64_t H : {64, 200, 1000})
    for (bool output_rows : {false, true})
      for (ActType t : {ActType::kF32, ActType::kCompute})
        c.add(fmt::format("rms_norm/H{}_{}{}", H, type_name(t), output_rows ? "_output_rows" : ""), {.hidden = H},
              [=](OpRun& r) {
                const ForwardBatch& b = r.begin(paged_batch(kThree, 97));
                const int64_t T = b.num_tokens(), R = output_rows ? static_cast<int64_t>(b.output_tokens.size()) : T;
                const Act x = r.input(kX, T, H, ActType::kF32, 2);
                const Weight w = r.vector(H, 3);
                const Act y = r.output(kY, R, H, t);
                r.ops().rms_norm(x, w, y, 1e-5f, output_rows);
                r.out("y", y, t == ActType::kF32 ? kF32 : kBf16);
              });
  for (const ActType t : {ActType::kF32, ActType::kCompute})  // the residual, and the linears' copy
    c.add(fmt::format("layer_norm/H200_{}", t == ActType::kF32 ? "f32" : "bf16"), {.hidden = 200}, [t](OpRun& r) {
      const ForwardBatch& b = r.begin(paged_batch(kThree, 97));
      const Act x = r.input(kX, b.num_tokens(), 200, ActType::kF32, 2);
      const Weight w = r.vector(200, 3), bias = r.vector(200, 4, 0.0f);
      const Act y = r.output(kY, b.num_tokens(), 200, t);
      r.ops().layer_norm(x, w, bias, y, 1e-12f);
      r.out("y", y, t == ActType::kF32 ? kF32 : kBf16);
    });
  c.add("gather_output_rows/H200", {.hidden = 200}, [](OpRun& r) {
    const ForwardBatch& b = r.begin(paged_batch(kThree, 97));
    const Act x = r.input(kX, b.num_tokens(), 200, ActType::kF32, 2);
    const Act rows = r.output(kY, static_cast<int64_t>(b.output_tokens.size()), 200, ActType::kF32);
    r.ops().gather_output_rows(x, rows);
    r.out("rows", rows, kExact);
  });
}

void linear_cases(Cases& c) {
  struct Mnk {
    int64_t M, N, K;
  };
  for (const Mnk s : {Mnk{1, 48, 64}, Mnk{3, 200, 64}, Mnk{17, 48, 200}, Mnk{70, 200, 200}})
    for (int variant = 0; variant < 3; ++variant) {  // f32, f32 accumulated, bf16
      const bool acc = variant == 1;
      const ActType t = variant == 2 ? ActType::kCompute : ActType::kF32;
      c.add(fmt::format("linear/M{}_N{}_K{}_{}{}", s.M, s.N, s.K, type_name(t), acc ? "_acc" : ""), {}, [=](OpRun& r) {
        r.begin(paged_batch({{0, static_cast<int32_t>(s.M)}}, 97));
        const Act x = r.input(kX, s.M, s.K, ActType::kCompute, 2);
        const Weight w = r.matrix(s.N, s.K, 3);
        const Act y = acc ? r.input(kY, s.M, s.N, ActType::kF32, 4) : r.output(kY, s.M, s.N, t);
        r.ops().linear(x, w, {}, y, acc);
        r.out("y", y, t == ActType::kF32 ? kF32 : kBf16);
      });
    }
  c.add("linear/bias", {}, [](OpRun& r) {
    r.begin(paged_batch({{0, 3}}, 97));
    const Act x = r.input(kX, 3, 64, ActType::kCompute, 2);
    const Weight w = r.matrix(48, 64, 3), bias = r.vector(48, 4, 0.0f);
    const Act y = r.output(kY, 3, 48, ActType::kF32);
    r.ops().linear(x, w, bias, y, false);
    r.out("y", y, kF32);
  });
  // W8A8 (--quantization fp8): the CPU emulates the GPU's rounding of w and x (fp8_projections.h).
  for (int64_t M : {1, 5, 40})
    c.add(fmt::format("linear/fp8_projection_M{}", M), {.fp8_projections = true}, [M](OpRun& r) {
      r.begin(paged_batch({{0, static_cast<int32_t>(M)}}, 97));
      const Act x = r.input(kX, M, 128, ActType::kCompute, 2);
      const Weight w = r.projection(64, 128, 3);
      const Act y = r.output(kY, M, 64, ActType::kF32);
      r.ops().linear(x, w, {}, y, false);
      r.out("y", y, 1e-3);
    });
}

// The fused QKV step: q out, K and V into the cache at the batch's slots, the captured tokens'
// pre-RoPE K and V into the pool.
struct QkvVariant {
  const char* name;
  OpShape shape;
  bool bias = false, qk_norm = false, capture = false, rope = true;
};

void qkv_cases(Cases& c) {
  const QkvVariant variants[] = {
      {"mha_D64", {.heads = 4, .kv_heads = 4, .head_dim = 64}},
      {"gqa4_D128_bias_qk_norm", {.heads = 8, .kv_heads = 2, .head_dim = 128}, true, true},
      {"gqa7_D64_interleaved_capture", {.heads = 14, .kv_heads = 2, .head_dim = 64, .rope_interleaved = true}, false, false, true},
      {"no_rope", {.heads = 4, .kv_heads = 4, .head_dim = 64}, false, false, false, false},
  };
  for (const QkvVariant& v : variants)
    c.add(std::string("qkv/") + v.name, v.shape, [v](OpRun& r) {
      ForwardBatch batch = paged_batch(kThree, 97);
      if (v.capture) {
        batch.capture_tokens = {0, 3, 6, 32};
        batch.capture_slots = {5, 17, 100, 127};
      }
      const ForwardBatch& b = r.begin(std::move(batch));
      const int64_t T = b.num_tokens(), D = r.cfg.head_dim, QS = r.cfg.q_size(), QKV = QS + 2 * r.cfg.kv_size();
      QkvStep step;
      step.rope = v.rope;
      step.eps = 1e-6f;
      if (v.bias) step.bias = r.vector(QKV, 5, 0.0f);
      if (v.qk_norm) {
        step.q_norm = r.vector(D, 6);
        step.k_norm = r.vector(D, 7);
      }
      const Act qkv = r.input(kQkv, T, QKV, ActType::kF32, 2);
      const Act q = r.output(kQ, T, QS, ActType::kCompute);
      r.ops().qkv(qkv, step, 0, q);
      r.out("q", q, kBf16);
      r.kv("cache_k", false, 0, b.slot_mapping, kBf16);
      r.kv("cache_v", false, 1, b.slot_mapping, kBf16);
      if (v.capture) {
        r.kv("pool_k", true, 0, b.capture_slots, kBf16);
        r.kv("pool_v", true, 1, b.capture_slots, kBf16);
      }
    });
}

// Attention of `step`'s tokens after `fill` wrote the cached entries (through qkv, layer 0).
void attend(OpRun& r, const std::vector<SeqSpan>& fill, ForwardBatch step, double tol,
            AttnMask mask = AttnMask::kCausal) {
  const int64_t QS = r.cfg.q_size(), QKV = QS + 2 * r.cfg.kv_size();
  QkvStep rope;
  if (!fill.empty()) {
    const ForwardBatch& f = r.begin(paged_batch(fill, 97));
    const Act qkv = r.input(kQkv, f.num_tokens(), QKV, ActType::kF32, 11);
    r.ops().qkv(qkv, rope, 0, r.output(kQ, f.num_tokens(), QS, ActType::kCompute));
  }
  const ForwardBatch& b = r.begin(std::move(step), mask);
  const int64_t T = b.num_tokens();
  const Act qkv = r.input(kQkv, T, QKV, ActType::kF32, 12);
  const Act q = r.output(kQ, T, QS, ActType::kCompute);
  r.ops().qkv(qkv, rope, 0, q);
  const Act out = r.output(kOut, T, QS, ActType::kCompute);
  r.ops().attention(q, 0, out);
  r.out("out", out, tol);
}

// Facts read in place (ForwardBatch::fact_*): `seqs` sequences of `prefix` computed tokens, facts
// of these lengths from the pool (captured there first, each from a pool block boundary, so that
// they start and end inside the sequences' blocks; the sequences share them), then `question`
// tokens. Attention of the prefix and question's tokens, or, for the first `decoding` sequences,
// of their last token alone after the others were cached (several: the decode kernel; beside
// prefills: a mixed step, the two kernels at once).
void attend_facts(OpRun& r, int32_t prefix, const std::vector<int32_t>& facts, int32_t question, int32_t decoding,
                  int32_t seqs = 1) {
  constexpr int32_t bs = OpsUnderTest::kBlockSize;
  const int64_t QS = r.cfg.q_size(), QKV = QS + 2 * r.cfg.kv_size();
  int32_t F = 0;
  std::vector<int64_t> slots;  // the pool slot of each fact token
  for (int64_t block = 0; const int32_t f : facts) {
    for (int32_t i = 0; i < f; ++i) slots.push_back(block * bs + i);
    block += (f + bs - 1) / bs;
    F += f;
  }
  QkvStep rope;
  {  // the facts' pre-RoPE K and V into the pool, from tokens in blocks of their own
    ForwardBatch fill = paged_batch({{0, 0}, {0, F}}, 97);
    for (int32_t t = 0; t < F; ++t) {
      fill.capture_tokens.push_back(t);
      fill.capture_slots.push_back(slots[static_cast<size_t>(t)]);
    }
    r.begin(std::move(fill));
    r.ops().qkv(r.input(kQkv, F, QKV, ActType::kF32, 21), rope, 0, r.output(kQ, F, QS, ActType::kCompute));
  }
  const int32_t N = prefix + F + question;
  const ForwardBatch tables = paged_batch(std::vector<SeqSpan>(static_cast<size_t>(seqs), SeqSpan{0, N}), 97);
  const int32_t per_seq = tables.kv_indptr[1];
  std::vector<int32_t> table = tables.kv_indices;  // [seqs * per_seq]
  for (int32_t b = 0; b < static_cast<int32_t>(table.size()); ++b)
    if (b % per_seq * bs >= prefix && (b % per_seq + 1) * bs <= prefix + F) table[static_cast<size_t>(b)] = ForwardBatch::kNoBlock;
  std::vector<int32_t> computed;  // every position but the facts'
  for (int32_t p = 0; p < N; ++p)
    if (p < prefix || p >= prefix + F) computed.push_back(p);
  // Sequence s's positions: cached before the step (decoding ones: all but the last), or in it.
  auto positions_of = [&](int32_t s, bool cached) {
    if (s >= decoding) return cached ? std::vector<int32_t>{} : computed;
    return cached ? std::vector<int32_t>(computed.begin(), computed.end() - 1) : std::vector<int32_t>{computed.back()};
  };
  auto batch = [&](bool cached) {
    ForwardBatch b;
    b.q_indptr = {0};
    b.kv_indptr = {0};
    b.fact_indptr = {0};
    for (int32_t s = 0; s < seqs; ++s) {
      const int32_t* t = table.data() + s * per_seq;
      for (const int32_t p : positions_of(s, cached)) {
        b.token_ids.push_back((p * 7 + s) % 97);
        b.positions.push_back(p);
        b.slot_mapping.push_back(static_cast<int64_t>(t[p / bs]) * bs + p % bs);
      }
      b.q_indptr.push_back(b.num_tokens());
      b.kv_indices.insert(b.kv_indices.end(), t, t + per_seq);
      b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
      if (b.q_indptr[s + 1] > b.q_indptr[s]) b.output_tokens.push_back(b.num_tokens() - 1);
      for (const int64_t slot : slots) b.fact_slots.push_back(static_cast<int32_t>(slot));
      b.fact_indptr.push_back(static_cast<int32_t>(b.fact_slots.size()));
      b.fact_start.push_back(prefix);
    }
    return b;
  };
  if (decoding > 0) {
    ForwardBatch cached = batch(true);
    const int64_t n = cached.num_tokens();
    r.begin(std::move(cached));
    r.ops().qkv(r.input(kQkv, n, QKV, ActType::kF32, 22), rope, 0, r.output(kQ, n, QS, ActType::kCompute));
  }
  const ForwardBatch& b = r.begin(batch(false));
  const int64_t T = b.num_tokens();
  const Act q = r.output(kQ, T, QS, ActType::kCompute);
  r.ops().qkv(r.input(kQkv, T, QKV, ActType::kF32, 23), rope, 0, q);
  const Act out = r.output(kOut, T, QS, ActType::kCompute);
  r.ops().attention(q, 0, out);
  r.out("out", out, kAttn);
}

void attention_cases(Cases& c) {
  struct Heads {
    int64_t group, head_dim;
  };
  // head_dim 32 (all-MiniLM-L6-v2's) runs on the tiles only, its one-token sequences too.
  for (const Heads h : {Heads{1, 64}, Heads{4, 128}, Heads{7, 64}, Heads{4, 64}, Heads{1, 32}, Heads{4, 32}}) {
    const OpShape shape{.heads = 2 * h.group, .kv_heads = 2, .head_dim = h.head_dim};
    const std::string tag = fmt::format("group{}_D{}", h.group, h.head_dim);
    c.add("attention/prefill_" + tag, shape,
          [](OpRun& r) { attend(r, {}, paged_batch({{0, 1}, {0, 17}, {0, 55}}, 97), kAttn); });
    c.add("attention/decode_" + tag, shape, [](OpRun& r) {
      attend(r, {{0, 33}, {0, 300}, {0, 15}}, paged_batch({{33, 1}, {300, 1}, {15, 1}}, 97), kAttn);
    });
    c.add("attention/decode_one_" + tag, shape,
          [](OpRun& r) { attend(r, {{0, 200}}, paged_batch({{200, 1}}, 97), kAttn); });
    // One-token sequences beside prefills: the GPU runs them on two kernels (a mixed step).
    c.add("attention/mixed_" + tag, shape, [](OpRun& r) {
      attend(r, {{0, 40}, {0, 300}}, paged_batch({{40, 1}, {300, 9}, {0, 23}, {0, 1}}, 97), kAttn);
    });
    c.add("attention/long_context_" + tag, shape,
          [](OpRun& r) { attend(r, {{0, 500}}, paged_batch({{500, 3}}, 97), kAttn); });
  }
  // A sequence starting at position 20 with nothing before it (a fact encoded where it is served).
  c.add("attention/kv_start", {.heads = 8, .kv_heads = 2}, [](OpRun& r) {
    ForwardBatch b = paged_batch({{20, 9}, {0, 4}}, 97);
    b.kv_start = {20, 0};
    attend(r, {}, std::move(b), kAttn);
  });
  c.add("attention/fp8_cache_decode", {.heads = 8, .kv_heads = 2, .head_dim = 128, .fp8_cache = true}, [](OpRun& r) {
    attend(r, {{0, 70}, {0, 129}}, paged_batch({{70, 1}, {129, 1}}, 97), kFp8Attn);
  });
  c.add("attention/fp8_cache_prefill", {.heads = 8, .kv_heads = 2, .head_dim = 64, .fp8_cache = true}, [](OpRun& r) {
    attend(r, {{0, 30}}, paged_batch({{30, 19}, {0, 7}}, 97), kFp8Attn);
  });
  // Facts read in place: lengths 1, 15, 16, 17 and 55 after 13 prefix tokens, GQA 1/4/7, head_dim
  // 64/128, a prefill of prefix and question and a decode step; interleaved RoPE once.
  struct FactShape {
    int64_t group, head_dim;
    bool interleaved;
  };
  for (const FactShape h : {FactShape{1, 64, false}, FactShape{4, 128, false}, FactShape{7, 64, false}, FactShape{4, 64, true}})
    for (const int32_t mode : {0, 1, 3, 4}) {
      // a prefill; a decode step of 1 sequence (tiles) and of 3 (decode kernel); 2 decodes beside 2 prefills (mixed)
      const OpShape shape{.heads = 2 * h.group, .kv_heads = 2, .head_dim = h.head_dim, .rope_interleaved = h.interleaved};
      const char* name = mode == 0 ? "prefill" : mode == 1 ? "decode1" : mode == 3 ? "decode3" : "mixed";
      c.add(fmt::format("attention/facts_in_place_{}_group{}_D{}{}", name, h.group, h.head_dim, h.interleaved ? "_interleaved" : ""),
            shape, [mode](OpRun& r) {
              const int32_t seqs = mode == 4 ? 4 : std::max(mode, 1), decoding = mode == 4 ? 2 : mode;
              attend_facts(r, 13, {1, 15, 16, 17, 55}, 9, decoding, seqs);
            });
    }
  // Encoders: each token sees its whole sequence, one token, several kv chunks, GQA and MiniLM's
  // 12 heads of 32.
  struct Bidir {
    int64_t heads, kv_heads, head_dim;
  };
  for (const Bidir h : {Bidir{4, 4, 64}, Bidir{12, 12, 32}, Bidir{8, 2, 32}, Bidir{8, 2, 128}}) {
    c.add(fmt::format("attention/bidirectional_H{}_KV{}_D{}", h.heads, h.kv_heads, h.head_dim),
          {.heads = h.heads, .kv_heads = h.kv_heads, .head_dim = h.head_dim}, [](OpRun& r) {
            attend(r, {}, paged_batch({{0, 7}, {0, 1}, {0, 130}, {0, 12}}, 97), kAttn, AttnMask::kBidirectional);
          });
  }
}

void mlp_cases(Cases& c) {
  for (int64_t T : {1, 6, 33})
    for (int64_t I : {64, 200, 1000})
      c.add(fmt::format("silu_mul/T{}_I{}", T, I), {.inter = I}, [T, I](OpRun& r) {
        r.begin(paged_batch({{0, static_cast<int32_t>(T)}}, 97));
        const Act gu = r.input(kGu, T, 2 * I, ActType::kCompute, 2, 2.0f);
        const Act out = r.output(kOut, T, I, ActType::kCompute);
        r.ops().silu_mul(gu, out);
        r.out("out", out, kBf16);
      });
  struct Mik {
    int64_t M, I, K;
  };
  for (const Mik s : {Mik{1, 64, 64}, Mik{1, 200, 128}, Mik{4, 64, 64}, Mik{9, 200, 128}})
    c.add(fmt::format("linear_silu_mul/M{}_I{}_K{}", s.M, s.I, s.K), {.inter = s.I}, [s](OpRun& r) {
      r.begin(paged_batch({{0, static_cast<int32_t>(s.M)}}, 97));
      const Act x = r.input(kX, s.M, s.K, ActType::kCompute, 2);
      const Weight w = r.matrix(2 * s.I, s.K, 3, 0.2f);
      const Act gu = r.output(kGu, s.M, 2 * s.I, ActType::kCompute);  // scratch: not compared
      const Act out = r.output(kOut, s.M, s.I, ActType::kCompute);
      r.ops().linear_silu_mul(x, w, gu, out);
      r.out("out", out, 8e-3);  // the unfused path rounds x w^T to bf16 before the SiLU
    });
  c.add("gelu/T33_I200", {.inter = 200}, [](OpRun& r) {
    r.begin(paged_batch(kThree, 97));
    const Act x = r.input(kX, 33, 200, ActType::kCompute, 2);
    r.ops().gelu(x);
    r.out("x", x, kBf16);
  });
}

// Output rows of four sequences, with their logits filled: argmax, sampling and finish read them.
const ForwardBatch& output_batch(OpRun& r, ForwardBatch::Output output, int32_t argmax_vocab,
                                 std::vector<RowSampling> sampling = {}) {
  ForwardBatch b = paged_batch({{0, 3}, {0, 1}, {5, 2}, {0, 4}}, r.cfg.vocab_size);
  b.output = output;
  b.argmax_vocab = argmax_vocab;
  b.sampling = std::move(sampling);
  return r.begin(std::move(b));
}

void output_cases(Cases& c) {
  for (int64_t V : {1000, 32001})
    for (int32_t span : {0, 700})
      c.add(fmt::format("argmax/V{}_span{}", V, span), {.vocab = V}, [V, span](OpRun& r) {
        const ForwardBatch& b = output_batch(r, ForwardBatch::Output::kArgmax, span);
        const int64_t R = static_cast<int64_t>(b.output_tokens.size());
        const Act logits = r.input(kX, R, V, ActType::kF32, 2, 3.0f);
        const Act ids = r.output(kIds, R, 1, ActType::kF32);
        r.ops().argmax(logits, argmax_span(b, V), ids);
        r.out("ids", ids, 0.0, true);
      });
  c.add("sample/V32001", {.vocab = 32001}, [](OpRun& r) {
    std::vector<RowSampling> rows(4);
    rows[1] = {.temperature = 0.8f, .top_k = 40, .u = 0.3f};
    rows[2] = {.temperature = 1.0f, .top_p = 0.9f, .u = 0.77f};
    rows[3] = {.temperature = 0.7f, .u = 0.5f, .min_gap = min_p_gap(0.7f, 0.05f)};
    const ForwardBatch& b = output_batch(r, ForwardBatch::Output::kSample, 0, rows);
    const Act logits = r.input(kX, 4, 32001, ActType::kF32, 2, 3.0f);
    const Act ids = r.output(kIds, 4, 1, ActType::kF32);
    r.ops().sample(logits, argmax_span(b, 32001), ids);
    r.out("ids", ids, 0.0, true);
  });
  c.add("finish/values", {.vocab = 1000}, [](OpRun& r) {
    output_batch(r, ForwardBatch::Output::kLogits, 0);
    r.finish("values", r.input(kX, 4, 1000, ActType::kF32, 2), false, 0.0);
  });
  c.add("finish/ids", {.vocab = 1000}, [](OpRun& r) {
    const ForwardBatch& b = output_batch(r, ForwardBatch::Output::kArgmax, 0);
    const Act logits = r.input(kX, 4, 1000, ActType::kF32, 2, 3.0f);
    const Act ids = r.output(kIds, 4, 1, ActType::kF32);
    r.ops().argmax(logits, argmax_span(b, 1000), ids);
    r.finish("ids", ids, true, 0.0);
  });
}

}  // namespace

std::vector<OpCase> op_cases() {
  Cases c;
  embed_cases(c);
  norm_cases(c);
  linear_cases(c);
  qkv_cases(c);
  attention_cases(c);
  mlp_cases(c);
  output_cases(c);
  return std::move(c.all);
}

}  // namespace inferscale::test
