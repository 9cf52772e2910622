// Quality of injected memory on a real trained model (stories260K): how close `inject` comes to
// the full joint prefill, for several Context-Window Encoding windows w.
//
// Each sample is a story the model wrote itself (seeded sampling from BOS), split into sentences:
// the earlier sentences are the facts, the last one plays the question. Over the question's tokens
// it compares the next-token distributions of
//   full      [BOS][s_1]...[s_m][q]            one joint prefill (the reference; = `text` mode)
//   inject w  [BOS][s_1]...[s_m][q]            s_i's KV encoded alone after its w preceding
//                                             sentences, injected at its serving positions
//   no facts  [BOS][q]                         what the facts are worth at all
// and prints mean KL(full || x) and top-1 agreement as a markdown table.
//
// --kv-dtypes f32,bf16,f16,fp8 also serves each window's facts from KV rounded to a 16-bit dtype,
// as a KV file in that dtype would hold it, or as an FP8 memory pool holds it
// (--memory-kv-dtype fp8), and compares it with the f32 KV it was rounded from: what storing KV in
// fewer bits costs. --kv-cache-dtype fp8 also runs the full prefill and each window's injection on
// a backend whose paged KV cache is FP8 (every token's K and V, the question's too, read back
// rounded), against the same f32-cache reference.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_kv_store.h"
#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/logprobs.h"
#include "memory/kv/fact_encoder.h"
#include "model/model.h"
#include "tensor/dtype.h"

using namespace inferscale;

namespace {

struct Sample {
  std::vector<std::vector<int32_t>> facts;  // sentence tokens, no BOS
  std::vector<int32_t> question;
};

std::vector<std::string> split_sentences(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    cur += text[i];
    const char c = text[i];
    if ((c == '.' || c == '!' || c == '?') && (i + 1 == text.size() || text[i + 1] == ' ' || text[i + 1] == '\n')) {
      size_t b = cur.find_first_not_of(" \n");
      if (b != std::string::npos) out.push_back(cur.substr(b));
      cur.clear();
    }
  }
  return out;
}

// Next-token distributions (log-softmax rows) at token indices [from, n) of the sequence.
using Rows = std::vector<std::vector<double>>;

// One forward of `positions` of `tokens` (the rest already in the cache), rows for `rows_from`..
Rows forward_rows(Backend& be, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                  const std::vector<int32_t>& table, int32_t rows_from) {
  const int32_t bs = be.block_size();
  ForwardBatch fb;
  for (int32_t p : positions) {
    if (p >= rows_from) fb.output_tokens.push_back(fb.num_tokens());
    fb.token_ids.push_back(tokens[static_cast<size_t>(p)]);
    fb.positions.push_back(p);
    fb.slot_mapping.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs);
  }
  fb.q_indptr = {0, fb.num_tokens()};
  fb.kv_indices = table;
  fb.kv_indptr = {0, static_cast<int32_t>(table.size())};
  std::vector<float> logits;
  be.forward(fb, logits);
  const int64_t V = be.config().vocab_size;
  Rows rows;
  for (size_t r = 0; r < fb.output_tokens.size(); ++r) rows.push_back(log_softmax_row(std::span<const float>(&logits[r * V], static_cast<size_t>(V))));
  return rows;
}

// How the injected KV is stored: f32 (as computed), a 16-bit dtype (as a KV file of it holds it),
// or fp8 (as an FP8 memory pool holds it: E4M3 with a scale per token and kv head).
struct KvStorage {
  std::string name;
  DType dtype = DType::kF32;
  bool fp8 = false;
};

KvStorage storage_of(const std::string& s) {
  if (s == "f32") return {s, DType::kF32};
  if (s == "bf16") return {s, DType::kBF16};
  if (s == "f16") return {s, DType::kF16};
  if (s == "fp8") return {s, DType::kF32, true};
  throw std::runtime_error("--kv-dtypes: f32, bf16, f16 or fp8, not " + s);
}

// Rounds KV rows [L, n, NKV * D] as `st` stores them (f32: unchanged). FP8 goes through the CPU
// backend's own FP8 pool code (cpu_kv_store.h), written and read back.
void round_through(const KvStorage& st, const ModelConfig& cfg, std::vector<float>& x) {
  if (st.fp8) {
    const int64_t KS = cfg.kv_size(), n = static_cast<int64_t>(x.size()) / (cfg.num_layers * KS);
    CpuKvStore pool(cfg.num_layers, n, cfg.num_kv_heads, cfg.head_dim, true);
    std::vector<int64_t> slots(static_cast<size_t>(n));
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      pool.write(l, 0, slots.data(), n, x.data() + l * n * KS);
      pool.read(l, 0, slots.data(), n, x.data() + l * n * KS);
    }
  } else if (st.dtype == DType::kBF16) {
    for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
  } else if (st.dtype == DType::kF16) {
    for (float& v : x) v = f16_to_f32(f32_to_f16(v));
  }
}

struct Score {
  double kl = 0;
  double agree = 0;
  int64_t n = 0;
  void add(const Rows& ref, const Rows& x) {
    for (size_t r = 0; r < ref.size(); ++r) {
      double kl_r = 0;
      for (size_t i = 0; i < ref[r].size(); ++i) kl_r += std::exp(ref[r][i]) * (ref[r][i] - x[r][i]);
      kl += kl_r;
      const auto a = std::max_element(ref[r].begin(), ref[r].end()) - ref[r].begin();
      const auto b = std::max_element(x[r].begin(), x[r].end()) - x[r].begin();
      agree += a == b ? 1 : 0;
      ++n;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stories260K: inject vs full prefill quality for several windows"};
  std::string model_path = std::string(INFERSCALE_SOURCE_DIR) + "/../shared/data/models/stories260K/stories260K.gguf";
  int num_stories = 64;
  std::vector<int> windows{0, 1, 2, 4};
  bool sink = false;
  uint64_t seed = 1234;
  std::vector<std::string> kv_dtypes{"f32"};
  app.add_option("--model", model_path, "model (GGUF or HF dir)");
  app.add_option("--stories", num_stories, "number of sampled stories");
  app.add_option("--windows", windows, "CWE windows to compare")->delimiter(',');
  app.add_flag("--sink", sink, "encode each fact after a BOS token too (its KV discarded)");
  app.add_option("--seed", seed, "sampling seed");
  std::string kv_cache_dtype = "native";
  app.add_option("--kv-cache-dtype", kv_cache_dtype, "also serve from an FP8 paged KV cache (native | fp8)")
      ->check(CLI::IsMember({"native", "fp8"}));
  app.add_option("--kv-dtypes", kv_dtypes, "serve the injected KV rounded to these dtypes too (f32, bf16, f16, fp8)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  Model m = load_model(model_path);
  const Tokenizer& tok = *m.tokenizer;
  const int32_t bos = tok.bos_id().value_or(1);

  // 1. The model writes its own stories.
  BackendOptions bo;
  bo.num_cache_blocks = 4096;
  bo.num_pool_blocks = 256;
  std::vector<Sample> samples;
  {
    Engine gen(make_cpu_backend(m.config, m.weights, bo), m.tokenizer, EngineOptions{});
    for (int i = 0; i < num_stories; ++i) {
      SamplingParams sp;
      sp.temperature = 0.8f;
      sp.top_p = 0.95f;
      sp.seed = seed + static_cast<uint64_t>(i);
      sp.max_tokens = 300;
      gen.add_request({bos}, sp);
    }
    for (const RequestOutput& o : gen.run_to_completion()) {
      auto sentences = split_sentences(tok.decode(o.new_tokens));
      if (sentences.size() < 3) continue;
      Sample s;
      for (size_t i = 0; i + 1 < sentences.size(); ++i) s.facts.push_back(tok.encode(sentences[i]));
      s.question = tok.encode(sentences.back());
      if (s.question.size() < 2) continue;
      samples.push_back(std::move(s));
    }
  }

  auto be = make_cpu_backend(m.config, m.weights, bo);
  const int32_t bs = be->block_size();
  std::unique_ptr<Backend> be8;  // --kv-cache-dtype fp8: the FP8-cache backend
  if (kv_cache_dtype == "fp8") {
    BackendOptions o8 = bo;
    o8.cache_fp8 = true;
    be8 = make_cpu_backend(m.config, m.weights, o8);
  }
  Score full8;                              // KL(full, f32 cache || full, FP8 cache)
  std::vector<Score> inj8(windows.size());  // KL(full, f32 cache || inject w, FP8 cache)
  Score none;
  std::vector<KvStorage> dts;
  for (const std::string& d : kv_dtypes) dts.push_back(storage_of(d));
  // [window][dtype]: against the full prefill, and against the same window's f32 KV.
  std::vector<std::vector<Score>> inj(windows.size(), std::vector<Score>(dts.size()));
  std::vector<std::vector<Score>> vs_f32(windows.size(), std::vector<Score>(dts.size()));
  int64_t facts_total = 0, tokens_total = 0;
  for (const Sample& s : samples) {
    std::vector<int32_t> seq{bos};
    std::vector<int32_t> fact_start;
    for (const auto& f : s.facts) {
      fact_start.push_back(static_cast<int32_t>(seq.size()));
      seq.insert(seq.end(), f.begin(), f.end());
    }
    const int32_t q0 = static_cast<int32_t>(seq.size());
    seq.insert(seq.end(), s.question.begin(), s.question.end());
    const int32_t n = static_cast<int32_t>(seq.size());
    facts_total += static_cast<int64_t>(s.facts.size());
    tokens_total += n;
    std::vector<int32_t> table;
    for (int32_t b = 0; b * bs < n; ++b) table.push_back(b);
    // Reference: the joint prefill.
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    const Rows ref = forward_rows(*be, seq, all, table, q0);
    // No facts: [BOS][q].
    std::vector<int32_t> bare{bos};
    bare.insert(bare.end(), s.question.begin(), s.question.end());
    std::vector<int32_t> bare_pos(bare.size());
    std::iota(bare_pos.begin(), bare_pos.end(), 0);
    none.add(ref, forward_rows(*be, bare, bare_pos, table, 1));
    if (be8) full8.add(ref, forward_rows(*be8, seq, all, table, q0));
    // Each window's facts encoded (on backend b) into pool slots 0.., and the batch that injects
    // them at their serving positions.
    auto encode_facts = [&](Backend& b, int w) {
      std::vector<EncodeJob> jobs;
      int64_t pool_slot = 0;
      for (size_t i = 0; i < s.facts.size(); ++i) {
        EncodeJob j;
        if (sink) j.window.push_back(bos);
        for (size_t k = i >= static_cast<size_t>(w) ? i - w : 0; k < i; ++k)
          j.window.insert(j.window.end(), s.facts[k].begin(), s.facts[k].end());
        j.fact = s.facts[i];
        for (size_t t = 0; t < j.fact.size(); ++t) j.pool_slots.push_back(pool_slot++);
        jobs.push_back(std::move(j));
      }
      // The encoder's temporary blocks come from 64 on; 0..63 hold the sequence.
      BlockManager enc_blocks(bo.num_cache_blocks, bs);
      for (int32_t blk = 0; blk < 64; ++blk) enc_blocks.allocate();  // keep the sequence's blocks out of its reach
      FactEncoder encoder(b, enc_blocks);
      encoder.encode(jobs);
      InjectBatch ib;
      int64_t src = 0;
      for (size_t i = 0; i < s.facts.size(); ++i)
        for (size_t t = 0; t < s.facts[i].size(); ++t) {
          const int32_t p = fact_start[i] + static_cast<int32_t>(t);
          ib.src_slots.push_back(src++);
          ib.dst_slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs);
          ib.positions.push_back(p);
        }
      return ib;
    };
    std::vector<int32_t> rest{0};
    for (int32_t p = q0; p < n; ++p) rest.push_back(p);
    // Inject, for each window.
    for (size_t wi = 0; wi < windows.size(); ++wi) {
      const int w = windows[wi];
      if (be8) {
        const InjectBatch ib8 = encode_facts(*be8, w);
        be8->inject(ib8);
        inj8[wi].add(ref, forward_rows(*be8, seq, rest, table, q0));
      }
      const InjectBatch ib = encode_facts(*be, w);
      HostTensor k32, v32;  // the encoded KV, as the f32 pool holds it
      be->read_pool(ib.src_slots, k32, v32);
      Rows f32_rows;
      for (size_t di = 0; di < dts.size(); ++di) {
        std::vector<float> k(k32.as<float>(), k32.as<float>() + k32.numel()), v(v32.as<float>(), v32.as<float>() + v32.numel());
        round_through(dts[di], m.config, k);
        round_through(dts[di], m.config, v);
        be->write_pool(ib.src_slots, HostTensor::view(DType::kF32, k32.shape, k.data()),
                       HostTensor::view(DType::kF32, v32.shape, v.data()));
        be->inject(ib);
        const Rows rows = forward_rows(*be, seq, rest, table, q0);
        inj[wi][di].add(ref, rows);
        if (dts[di].name == "f32") f32_rows = rows;
        if (!f32_rows.empty()) vs_f32[wi][di].add(f32_rows, rows);
      }
    }
  }

  std::printf("\nstories260K: %zu stories, %lld facts (sentences), %.1f tokens per sequence, %lld question tokens%s\n\n",
              samples.size(), static_cast<long long>(facts_total),
              samples.empty() ? 0.0 : static_cast<double>(tokens_total) / samples.size(), static_cast<long long>(none.n),
              sink ? ", facts encoded after a BOS sink" : "");
  std::printf("| variant | mean KL(full || variant) | top-1 agreement |\n|---|---|---|\n");
  std::printf("| full joint prefill (= text mode) | 0 | 100.0%% |\n");
  for (size_t wi = 0; wi < windows.size(); ++wi)
    for (size_t di = 0; di < dts.size(); ++di) {
      const Score& sc = inj[wi][di];
      const std::string tag = dts.size() > 1 ? ", KV in " + dts[di].name : "";
      std::printf("| inject, w = %d%s | %.4f | %.1f%% |\n", windows[wi], tag.c_str(), sc.kl / sc.n, 100.0 * sc.agree / sc.n);
    }
  std::printf("| no facts | %.4f | %.1f%% |\n", none.kl / none.n, 100.0 * none.agree / none.n);
  if (be8) {
    std::printf("\n| paged KV cache in FP8 (--kv-cache-dtype fp8) | mean KL(full, f32 cache || variant) | top-1 agreement |\n|---|---|---|\n");
    std::printf("| full joint prefill | %.2e | %.2f%% |\n", full8.kl / full8.n, 100.0 * full8.agree / full8.n);
    for (size_t wi = 0; wi < windows.size(); ++wi)
      std::printf("| inject, w = %d | %.4f | %.1f%% |\n", windows[wi], inj8[wi].kl / inj8[wi].n,
                  100.0 * inj8[wi].agree / inj8[wi].n);
  }
  if (dts.size() > 1 && dts[0].name == "f32") {
    std::printf("\n| KV stored in | window | mean KL(f32 KV || rounded KV) | top-1 agreement with f32 KV |\n|---|---|---|---|\n");
    for (size_t wi = 0; wi < windows.size(); ++wi)
      for (size_t di = 1; di < dts.size(); ++di)
        std::printf("| %s | %d | %.2e | %.2f%% |\n", dts[di].name.c_str(), windows[wi],
                    vs_f32[wi][di].kl / vs_f32[wi][di].n,
                    100.0 * vs_f32[wi][di].agree / vs_f32[wi][di].n);
  }
  return 0;
}
