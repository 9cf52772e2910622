// CPU decode steps of B sequences, side by side in one process, three backends on one model, their
// steps rotated: the few-rows linears over the GGUF's own blocks (Q4_1 / Q8_0 weights; the default),
// the few-rows linears over the f32 copy (backend/cpu/cpu_linear_rows.h), and OpenBLAS for every
// linear. Each sequence has a prompt of --context tokens already in the cache; a step is one
// token a sequence, greedy ids out (as the engine's decode steps). Prints ms a step and tokens/s.
//
//   bench_cpu_decode [--model demo|PATH.gguf] [--batches 1,2,4,8,16] [--context 256] [--steps 16]
//                    [--threads 0] [--only quant|rows|blas]   (--only: one backend, e.g. under a profiler)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_linear_rows.h"
#include "model/model.h"
#include "util/check.h"

using namespace inferscale;

namespace {

std::vector<int32_t> parse_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::atoi(s.substr(at, comma - at).c_str()));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// B sequences, sequence s in blocks [s * per_seq, (s + 1) * per_seq); tokens [from, to) of each.
ForwardBatch batch_of(int32_t B, int32_t per_seq, int32_t bs, int32_t from, int32_t to, int32_t vocab, bool ids) {
  ForwardBatch fb;
  fb.q_indptr = {0};
  fb.kv_indptr = {0};
  for (int32_t s = 0; s < B; ++s) {
    for (int32_t p = from; p < to; ++p) {
      fb.token_ids.push_back((37 * p + 101 * s + 7) % vocab);
      fb.positions.push_back(p);
      fb.slot_mapping.push_back(static_cast<int64_t>(s * per_seq + p / bs) * bs + p % bs);
    }
    fb.q_indptr.push_back(fb.num_tokens());
    for (int32_t b = 0; b <= (to - 1) / bs; ++b) fb.kv_indices.push_back(s * per_seq + b);
    fb.kv_indptr.push_back(static_cast<int32_t>(fb.kv_indices.size()));
    fb.output_tokens.push_back(fb.num_tokens() - 1);
  }
  fb.output = ids ? ForwardBatch::Output::kArgmax : ForwardBatch::Output::kLogits;
  return fb;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "demo";
  std::vector<int32_t> batches{1, 2, 4, 8, 16};
  int32_t context = 256, steps = 16, threads = 0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--batches") batches = parse_list(next());
    else if (a == "--context") context = std::atoi(next().c_str());
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--only") only = next();
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (context < 1 || steps < 1) {
    std::fprintf(stderr, "--context and --steps must be at least 1\n");
    return 2;
  }
  if (!only.empty() && only != "quant" && only != "rows" && only != "blas") {
    std::fprintf(stderr, "--only takes quant, rows or blas, not %s\n", only.c_str());
    return 2;
  }
  try {
    const Model m = load_model(model);
    const int32_t bs = 16, per_seq = (context + steps) / bs + 1;
    int32_t max_b = 1;
    for (int32_t b : batches) max_b = std::max(max_b, b);
    BackendOptions on, f32, off;
    on.num_cache_blocks = f32.num_cache_blocks = off.num_cache_blocks = static_cast<int64_t>(max_b) * per_seq;
    on.num_threads = f32.num_threads = off.num_threads = threads;
    f32.cpu_quant_linears = off.cpu_quant_linears = false;
    off.cpu_linear_rows = false;
    auto quant = make_cpu_backend(m.config, m.weights, on), rows = make_cpu_backend(m.config, m.weights, f32),
         blas = make_cpu_backend(m.config, m.weights, off);
    const std::vector<std::pair<std::string, Backend*>> all{{"quant", quant.get()}, {"rows", rows.get()}, {"blas", blas.get()}};
    const int32_t vocab = static_cast<int32_t>(m.config.vocab_size);
    std::printf("model %s, context %d, %d steps a batch, few-rows kernel %s\n", model.c_str(), context, steps,
                cpu::linear_rows_available() ? "available" : "NOT available (both columns are OpenBLAS)");
    std::printf("(a model without Q4_1 / Q8_0 weights runs the f32 copy in the first column too)\n");
    std::printf("| batch | GGUF blocks, few rows (ms a step) | f32, few rows | OpenBLAS | OpenBLAS / blocks | tokens/s blocks | tokens/s OpenBLAS |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (int32_t B : batches) {
      double t[3] = {0, 0, 0};
      ForwardOutput out;
      for (const auto& [name, be] : all) be->forward(batch_of(B, per_seq, bs, 0, context, vocab, true), out);
      for (int32_t st = 0; st < steps; ++st) {
        const ForwardBatch fb = batch_of(B, per_seq, bs, context + st, context + st + 1, vocab, true);
        for (int i = 0; i < 3; ++i) {  // rotated: none always meets the others' cache state
          const int j = (i + st) % 3;
          if (!only.empty() && only != all[static_cast<size_t>(j)].first) continue;
          const auto t0 = std::chrono::steady_clock::now();
          all[static_cast<size_t>(j)].second->forward(fb, out);
          t[j] += seconds_since(t0);
        }
      }
      const double ms[3] = {1e3 * t[0] / steps, 1e3 * t[1] / steps, 1e3 * t[2] / steps};
      std::printf("| %d | %.2f | %.2f | %.2f | %.2fx | %.1f | %.1f |\n", B, ms[0], ms[1], ms[2], ms[2] / ms[0],
                  1e3 * B / ms[0], 1e3 * B / ms[2]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
