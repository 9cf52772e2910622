// Serving benchmarks of the CUDA backend at Llama-3.1-8B shapes with seeded random bf16 weights:
//   (a) TTFT of a request whose k facts (30 tokens each) are injected and only a 32-token
//       question is prefilled, versus a full prefill of the same k * 30 + 32 tokens;
//   (b) decode tokens/s at batch 1 and 32 (1024-token contexts), CUDA graphs and Programmatic
//       Dependent Launch on and off;
//   (c) a decode step's GPU time by op (eager, events between ops);
//   (d) a mixed step (questions prefilled after 2,750 injected tokens beside 100 - q sequences
//       decoding over 2,800-token contexts: the HTTP load at k = 50), its decodes on the decode
//       kernel beside or after the questions' tiles, or on the tiles, side by side, bf16 and FP8.
// Greedy, as the engine runs it: each forward returns the argmax ids (ForwardBatch kArgmax), not
// the logits. Wall time covers the host (planning, uploads, the ids' copy); GPU time is between
// events on the backend's stream. Usage: bench_cuda_serving [--quick] [--decode-only] [--mixed-only]
// [--no-mixed] [--quantization fp8] (--decode-only: tables (b) and (c); --mixed-only: table (d);
// --no-mixed: all but (d); fp8: the layers' projections in FP8 E4M3, BackendOptions::projections_fp8)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_bench_common.h"

namespace inferscale {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kFactLen = 30;      // ~ a LoCoMo turn
constexpr int32_t kQuestionLen = 32;

std::vector<int32_t> tokens(size_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

// One sequence starting at block `first_block`, positions [p0, p0 + toks.size()).
void add_seq(ForwardBatch& fb, const std::vector<int32_t>& toks, int32_t p0, int32_t first_block, bool output = true) {
  if (fb.q_indptr.empty()) {
    fb.q_indptr = {0};
    fb.kv_indptr = {0};
  }
  const int32_t end = p0 + static_cast<int32_t>(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    const int32_t p = p0 + static_cast<int32_t>(i);
    fb.token_ids.push_back(toks[i]);
    fb.positions.push_back(p);
    fb.slot_mapping.push_back(static_cast<int64_t>(first_block + p / kBlock) * kBlock + p % kBlock);
  }
  if (output) fb.output_tokens.push_back(fb.num_tokens() - 1);
  fb.q_indptr.push_back(fb.num_tokens());
  for (int32_t b = 0; b < (end + kBlock - 1) / kBlock; ++b) fb.kv_indices.push_back(first_block + b);
  fb.kv_indptr.push_back(static_cast<int32_t>(fb.kv_indices.size()));
}

// The greedy token of output row `row` of a kArgmax forward.
int32_t greedy_id(const ForwardOutput& out, size_t row) { return out.ids[row]; }

// Encodes `k` facts of kFactLen random tokens alone (w = 0) into pool slots 0 .. k * kFactLen - 1
// (the sequences' blocks from `scratch_block` on).
void encode_facts(CudaBackend& be, int32_t k, int32_t scratch_block, ForwardOutput& out) {
  ForwardBatch enc;
  for (int32_t f = 0; f < k; ++f) {
    add_seq(enc, tokens(kFactLen, 100 + f, be.config().vocab_size), 0, scratch_block + f * 2);  // 2 blocks a fact
    for (int32_t i = 0; i < kFactLen; ++i) {
      enc.capture_tokens.push_back(f * kFactLen + i);
      enc.capture_slots.push_back(static_cast<int64_t>(f) * kFactLen + i);
    }
  }
  be.forward(enc, out);
}

// (d): `decodes` sequences of `ctx` injected tokens decode one token each beside `questions`
// 32-token questions after `ctx` injected tokens of their own (every context filled from the
// pool's facts); the mixed step's GPU time as served (the decodes on the decode kernel beside the
// questions' tiles) and with every sequence on the tiles (DecodeAttention::kTensorCore),
// alternately, then the decode-only step of the same sequences (graphed, as served).
void mixed_steps(const ModelConfig& cfg, bool fp8, bool quick, bool fp8_weights) {
  constexpr int32_t kSeqs = 100, kCtx = 2750, kFacts = 50;
  const int32_t iters = quick ? 4 : 12;
  const int32_t blocks_per_seq = (kCtx + kQuestionLen + kBlock - 1) / kBlock;
  BackendOptions o;
  o.block_size = kBlock;
  o.num_cache_blocks = (kSeqs + 1) * blocks_per_seq + kFacts * 2;
  o.num_pool_blocks = (kFacts * kFactLen + kBlock - 1) / kBlock;
  o.cache_fp8 = fp8;
  o.projections_fp8 = fp8_weights;
  auto be = make_cuda_backend_random(cfg, 42, o);
  ForwardOutput out;
  const int32_t scratch = (kSeqs + 1) * blocks_per_seq;
  encode_facts(*be, kFacts, scratch, out);
  InjectBatch inj;  // every sequence's [0, kCtx) from the pool, cycling over its facts
  for (int32_t s = 0; s < kSeqs; ++s)
    for (int32_t p = 0; p < kCtx; ++p) {
      inj.src_slots.push_back(p % (kFacts * kFactLen));
      inj.dst_slots.push_back(static_cast<int64_t>(s * blocks_per_seq + p / kBlock) * kBlock + p % kBlock);
      inj.positions.push_back(p);
    }
  be->inject(inj);
  const auto question = tokens(kQuestionLen, 7, cfg.vocab_size);
  std::printf("\n| KV cache | decodes + questions | mixed step, split | all on the tiles | tiles / split "
              "| attention ms, split / tiles (eager, profiled) | decode-only step (graphed) |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const int32_t q : {1, 4, 16}) {
    ForwardBatch mixed;  // sequences [0, 100 - q) decode at position kCtx, the last q prefill questions
    for (int32_t s = 0; s < kSeqs - q; ++s) add_seq(mixed, {question[static_cast<size_t>(s % kQuestionLen)]}, kCtx, s * blocks_per_seq);
    for (int32_t s = kSeqs - q; s < kSeqs; ++s) add_seq(mixed, question, kCtx, s * blocks_per_seq);
    mixed.output = ForwardBatch::Output::kArgmax;
    // The two ways, alternately, then the attention's share of each (eager with events between
    // ops, op_profile.h: the concurrent launches' overlap shows in their sum).
    const DecodeAttention ways[] = {kDefaultDecodeAttention, DecodeAttention::kTensorCore};
    std::vector<double> g[2];
    for (int32_t it = 0; it < iters + 1; ++it)
      for (int m = 0; m < 2; ++m) {
        be->set_decode_attention(ways[m]);
        be->forward(mixed, out);
        if (it > 0) g[m].push_back(be->last_gpu_ms());
      }
    double attn[2] = {0, 0};
    for (int m = 0; m < 2; ++m) {
      be->set_decode_attention(ways[m]);
      be->set_op_profile(true);
      be->forward(mixed, out);
      for (const OpTime& t : be->op_profile())
        if (t.op.rfind("attention", 0) == 0) attn[m] += t.ms;
      be->set_op_profile(false);
    }
    be->set_decode_attention(kDefaultDecodeAttention);
    ForwardBatch decode;  // the same decodes alone
    for (int32_t s = 0; s < kSeqs - q; ++s) add_seq(decode, {question[static_cast<size_t>(s % kQuestionLen)]}, kCtx, s * blocks_per_seq);
    decode.output = ForwardBatch::Output::kArgmax;
    std::vector<double> g_dec;
    for (int32_t it = 0; it < iters + 3; ++it) {
      be->forward(decode, out);
      if (it >= 3) g_dec.push_back(be->last_gpu_ms());
    }
    const double ms = bench::median(g[0]), mt = bench::median(g[1]);
    std::printf("| %s | %d + %d | %.2f | %.2f | %.2fx | %.2f / %.2f | %.2f |\n", fp8 ? "FP8" : "bf16", kSeqs - q, q, ms,
                mt, mt / ms, attn[0], attn[1], bench::median(g_dec));
  }
  // A burst's first forward (bench_memory_serving's 100 users at once): every sequence prefills its
  // question after its injected facts; where its time goes, by op (eager, events between ops).
  ForwardBatch burst;
  for (int32_t s = 0; s < kSeqs; ++s) add_seq(burst, question, kCtx, s * blocks_per_seq);
  burst.output = ForwardBatch::Output::kArgmax;
  be->forward(burst, out);
  const double gpu = be->last_gpu_ms();
  be->set_op_profile(true);
  be->forward(burst, out);
  std::vector<OpTime> ops = be->op_profile();
  be->set_op_profile(false);
  std::sort(ops.begin(), ops.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  std::printf("\n%s cache: %d questions of %d tokens after %d injected each, one forward: %.2f ms GPU (%.2f profiled); by op:\n",
              fp8 ? "FP8" : "bf16", kSeqs, kQuestionLen, kCtx, gpu, [&] { double t = 0; for (const OpTime& o : ops) t += o.ms; return t; }());
  for (const OpTime& o : ops) std::printf("  %-40s %8.3f ms  %5lld calls\n", o.op.c_str(), o.ms, static_cast<long long>(o.calls));
  std::printf("\n");
}

}  // namespace
}  // namespace inferscale

int main(int argc, char** argv) {
  using namespace inferscale;
  bool quick = false, decode_only = false, mixed_only = false, no_mixed = false, fp8_weights = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quantization") == 0 && i + 1 < argc &&
        (std::strcmp(argv[i + 1], "fp8") == 0 || std::strcmp(argv[i + 1], "none") == 0)) {
      fp8_weights = std::strcmp(argv[++i], "fp8") == 0;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--decode-only") == 0) {
      decode_only = true;
    } else if (std::strcmp(argv[i], "--mixed-only") == 0) {
      mixed_only = true;
    } else if (std::strcmp(argv[i], "--no-mixed") == 0) {
      no_mixed = true;
    } else {
      std::fprintf(stderr, "usage: bench_cuda_serving [--quick] [--decode-only] [--mixed-only] [--no-mixed] [--quantization none|fp8]\n");
      return 2;
    }
  }
  const int iters = quick ? 3 : 10;
  const ModelConfig cfg = bench::llama31_8b();
  const auto table_d = [&] {
    std::printf("\n(d) a mixed step: 100 sequences over %d-token contexts, q of them prefilling a %d-token question, "
                "the others decoding; GPU ms (events), medians, split and tiles alternately\n", 2750, kQuestionLen);
    for (const bool fp8 : {false, true}) mixed_steps(cfg, fp8, quick, fp8_weights);
  };
  if (mixed_only) {
    std::printf("device: %s\n", bench::device_name().c_str());
    table_d();
    return 0;
  }
  BackendOptions o;
  o.block_size = kBlock;
  o.num_cache_blocks = 4096;  // 65,536 tokens, 8.6 GB
  o.num_pool_blocks = 128;    // 2,048 fact tokens
  o.projections_fp8 = fp8_weights;
  const double t_load = bench::now_ms();
  auto be = make_cuda_backend_random(cfg, 42, o);
  std::printf("device: %s\nmodel: Llama-3.1-8B shapes, random bf16 weights%s (%.1f GB), KV cache + pool %.1f GB, init %.0f ms\n",
              bench::device_name().c_str(), fp8_weights ? ", projections quantized to FP8 E4M3" : "", be->weight_bytes() / 1e9, be->kv_bytes() / 1e9, bench::now_ms() - t_load);
  const int64_t V = cfg.vocab_size;
  ForwardOutput out;

  // Write path: encode 50 facts alone (w = 0), capturing pre-RoPE K and V into the pool.
  const int32_t max_k = 50;
  encode_facts(*be, max_k, 3000, out);  // blocks 3000.. : the scratch region
  std::printf("encoded %d facts x %d tokens into the pool: %.2f ms GPU\n", max_k, kFactLen, be->last_gpu_ms());

  // (a) TTFT.
  std::printf("\n(a) TTFT: k facts x %d tokens injected + %d-token question prefilled, vs full prefill\n", kFactLen,
              kQuestionLen);
  std::printf("| k | context tokens | inject+question wall ms | (GPU: inject + forward) | full prefill wall ms | (GPU) | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  const auto question = tokens(kQuestionLen, 7, V);
  // The last row repeats k = 50 with Programmatic Dependent Launch off, side by side.
  const std::vector<std::pair<int32_t, bool>> ttft_rows{{5, true}, {10, true}, {20, true}, {50, true}, {50, false}};
  for (const auto& [k, pdl] : decode_only ? std::vector<std::pair<int32_t, bool>>{} : ttft_rows) {
    be->set_programmatic_launch(pdl);
    const int32_t F = k * kFactLen;
    std::vector<double> w_inj, g_inj, w_full, g_full;
    // Facts in the request in reverse rank order (best last), positions contiguous from 0.
    InjectBatch inj;
    for (int32_t f = 0; f < k; ++f)
      for (int32_t i = 0; i < kFactLen; ++i) {
        const int32_t pos = f * kFactLen + i;
        inj.src_slots.push_back(static_cast<int64_t>(k - 1 - f) * kFactLen + i);
        inj.dst_slots.push_back(static_cast<int64_t>(pos / kBlock) * kBlock + pos % kBlock);
        inj.positions.push_back(pos);
      }
    ForwardBatch qb;
    add_seq(qb, question, F, 0);
    qb.output = ForwardBatch::Output::kArgmax;
    ForwardBatch full;
    std::vector<int32_t> all = tokens(static_cast<size_t>(F), 11, V);
    all.insert(all.end(), question.begin(), question.end());
    add_seq(full, all, 0, 0);
    full.output = ForwardBatch::Output::kArgmax;
    for (int it = 0; it < iters + 2; ++it) {
      double t0 = bench::now_ms();
      be->inject(inj);  // the host goes on to the forward; the injection's time is read after it
      be->forward(qb, out);
      volatile int32_t tok = greedy_id(out, 0);
      (void)tok;
      const double w1 = bench::now_ms() - t0, g1 = be->last_inject_gpu_ms() + be->last_gpu_ms();
      t0 = bench::now_ms();
      be->forward(full, out);
      tok = greedy_id(out, 0);
      const double w2 = bench::now_ms() - t0, g2 = be->last_gpu_ms();
      if (it >= 2) {  // the first two are warm-up (cuBLASLt plans, table growth)
        w_inj.push_back(w1);
        g_inj.push_back(g1);
        w_full.push_back(w2);
        g_full.push_back(g2);
      }
    }
    const double a = bench::median(w_inj), b = bench::median(w_full);
    std::printf("| %d%s | %d | %.2f | %.2f | %.2f | %.2f | %.2fx |\n", k, pdl ? "" : " (PDL off)", F + kQuestionLen, a,
                bench::median(g_inj), b, bench::median(g_full), b / a);
  }
  be->set_programmatic_launch(true);

  // (b) Decode, with each attention kernel for single-token batches (same cache, positions go on).
  std::printf("\n(b) decode: 1024-token contexts, one token per sequence per step\n");
  std::printf("| batch | decode attention | CUDA graphs | PDL | step wall ms | step GPU ms | tokens/s (wall) | tokens/s (GPU) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  struct Variant {
    DecodeAttention kind;
    bool graphs, pdl;
  };
  const Variant variants[] = {{DecodeAttention::kAuto, true, true},       {DecodeAttention::kAuto, true, false},
                              {DecodeAttention::kAuto, false, true},      {DecodeAttention::kAuto, false, false},
                              {DecodeAttention::kMma, true, true},        {DecodeAttention::kTensorCore, true, true}};
  // The variants take turns: `rounds` rounds, each variant decoding `warm` untimed steps (the
  // first round's capture the graph; later ones follow a switch of kernel or mode) then `timed`
  // timed ones; a variant's figure is the median of all its timed steps. Measured one after the
  // other instead, the first variant (auto, right after the prefill) ran 1.5-6% slower than the
  // same kernel measured later in the same process (run 29: batch 8 FP8, auto 4.79 ms against the
  // decode kernel's 4.51, which auto is at batch 8).
  const int32_t rounds = quick ? 3 : 6, timed = quick ? 4 : 6;
  auto warm_steps = [](int32_t round) { return round == 0 ? 3 : 1; };
  int32_t steps_per_variant = 0;
  for (int32_t r = 0; r < rounds; ++r) steps_per_variant += warm_steps(r) + timed;
  for (int32_t batch : {1, 2, 4, 8, 16, 32}) {
    const int32_t ctx = 1024;
    // Every variant decodes its steps into the same sequences, the positions going on.
    const int32_t blocks_per_seq =
        (ctx + static_cast<int32_t>(std::size(variants)) * steps_per_variant + kBlock - 1) / kBlock;
    ForwardBatch pre;
    for (int32_t s = 0; s < batch; ++s) add_seq(pre, tokens(ctx, 200 + s, V), 0, s * blocks_per_seq);
    pre.output = ForwardBatch::Output::kArgmax;
    be->forward(pre, out);
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int32_t s = 0; s < batch; ++s) next[static_cast<size_t>(s)] = greedy_id(out, static_cast<size_t>(s));
    int32_t pos = ctx;
    std::vector<std::vector<double>> w(std::size(variants)), g(std::size(variants));
    for (int32_t r = 0; r < rounds; ++r) {
      for (size_t v = 0; v < std::size(variants); ++v) {  // side by side, on the same cache
        const auto& [kind, graphs, pdl] = variants[v];
        be->set_decode_attention(kind);
        be->set_cuda_graphs(graphs);
        be->set_programmatic_launch(pdl);
        for (int32_t st = 0; st < warm_steps(r) + timed; ++st, ++pos) {
          ForwardBatch d;
          for (int32_t s = 0; s < batch; ++s) add_seq(d, {next[static_cast<size_t>(s)]}, pos, s * blocks_per_seq);
          d.output = ForwardBatch::Output::kArgmax;
          const double t0 = bench::now_ms();
          be->forward(d, out);
          for (int32_t s = 0; s < batch; ++s) next[static_cast<size_t>(s)] = greedy_id(out, static_cast<size_t>(s));
          if (st >= warm_steps(r)) {
            w[v].push_back(bench::now_ms() - t0);
            g[v].push_back(be->last_gpu_ms());
          }
        }
      }
    }
    for (size_t v = 0; v < std::size(variants); ++v) {
      const auto& [kind, graphs, pdl] = variants[v];
      const double mw = bench::median(w[v]), mg = bench::median(g[v]);
      std::printf("| %d | %s | %s | %s | %.2f | %.2f | %.0f | %.0f |\n", batch, decode_attention_name(kind),
                  graphs ? "on" : "off", pdl ? "on" : "off", mw, mg, batch * 1000.0 / mw, batch * 1000.0 / mg);
    }
  }
  be->set_decode_attention(kDefaultDecodeAttention);
  be->set_cuda_graphs(true);
  be->set_programmatic_launch(true);

  // (c) Where a step's time goes: eager, an event before each op (op_profile.h), so the ops run
  // one after the other (no overlap from PDL or graphs); summed per op over the steps. The decode
  // steps of (b), and the question forward of (a) at k = 50 (32 tokens after 1,500 in the cache).
  std::printf("\n(c) a step by op (eager, events between ops; decode attention: %s)\n",
              decode_attention_name(kDefaultDecodeAttention));
  be->set_cuda_graphs(false);
  const auto profile = [&](const char* what, int32_t steps, const std::function<ForwardBatch(int32_t)>& step_batch) {
    be->set_op_profile(true);
    double gpu = 0;
    for (int32_t st = 0; st < steps; ++st) {
      be->forward(step_batch(st), out);
      gpu += be->last_gpu_ms();
    }
    const std::vector<OpTime> ops = be->op_profile();
    be->set_op_profile(false);
    double sum = 0;
    for (const OpTime& t : ops) sum += t.ms;
    std::printf("%s: %.3f ms a step (GPU, events), ops summed %.3f ms\n", what, gpu / steps, sum / steps);
    std::printf("| op | calls a step | ms a step | us a call | share |\n|---|---|---|---|---|\n");
    for (const OpTime& t : ops)
      std::printf("| %s | %lld | %.3f | %.1f | %.1f%% |\n", t.op.c_str(), static_cast<long long>(t.calls / steps),
                  t.ms / steps, 1000.0 * t.ms / static_cast<double>(t.calls), 100.0 * t.ms / sum);
  };
  for (int32_t batch : {1, 32}) {
    const int32_t ctx = 1024, steps = quick ? 4 : 12, base = 2000;  // blocks past the (b) sequences
    const int32_t blocks_per_seq = (ctx + steps + kBlock - 1) / kBlock;
    ForwardBatch pre;
    for (int32_t s = 0; s < batch; ++s) add_seq(pre, tokens(ctx, 300 + s, V), 0, base + s * blocks_per_seq);
    pre.output = ForwardBatch::Output::kArgmax;
    be->forward(pre, out);
    std::vector<int32_t> next(out.ids.begin(), out.ids.end());
    const std::string what = "decode, batch " + std::to_string(batch) + ", 1024-token contexts";
    profile(what.c_str(), steps, [&](int32_t st) {
      ForwardBatch d;
      for (int32_t s = 0; s < batch; ++s) add_seq(d, {next[static_cast<size_t>(s)]}, ctx + st, base + s * blocks_per_seq);
      d.output = ForwardBatch::Output::kArgmax;
      return d;
    });
  }
  {
    const int32_t ctx = max_k * kFactLen, base = 2000;
    ForwardBatch pre;
    add_seq(pre, tokens(ctx, 400, V), 0, base);
    pre.output = ForwardBatch::Output::kArgmax;
    be->forward(pre, out);
    profile("question prefill, 32 tokens after 1,500 in the cache", quick ? 3 : 8, [&](int32_t) {
      ForwardBatch q;
      add_seq(q, tokens(kQuestionLen, 7, V), ctx, base);
      q.output = ForwardBatch::Output::kArgmax;
      return q;
    });
  }
  be->set_cuda_graphs(true);
  const GraphStats gs = be->graph_stats();
  std::printf("graph path: %lld warm-ups, %lld captures, %lld replays\n", static_cast<long long>(gs.eager_warmups),
              static_cast<long long>(gs.captures), static_cast<long long>(gs.replays));
  if (!decode_only && !no_mixed) {
    be.reset();  // (d) makes backends of its own, with caches of 100 x 2,800 tokens
    table_d();
  }
  return 0;
}
