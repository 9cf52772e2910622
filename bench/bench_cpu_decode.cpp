// CPU decode steps of B sequences, the few-rows linears (backend/cpu/cpu_linear_rows.h) against
// OpenBLAS for every linear, side by side in one process: two backends on one model, their steps
// alternated. Each sequence has a prompt of --context tokens already in the cache; a step is one
// token a sequence, greedy ids out (as the engine's decode steps). Prints ms a step and tokens/s.
//
//   bench_cpu_decode [--model demo|PATH.gguf] [--batches 1,2,4,8,16] [--context 256] [--steps 16]
//                    [--threads 0] [--only rows|blas]   (--only: one backend, e.g. under a profiler)
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
  if (!only.empty() && only != "rows" && only != "blas") {
    std::fprintf(stderr, "--only takes rows or blas, not %s\n", only.c_str());
    return 2;
  }
  try {
    const Model m = load_model(model);
    const int32_t bs = 16, per_seq = (context + steps) / bs + 1;
    int32_t max_b = 1;
    for (int32_t b : batches) max_b = std::max(max_b, b);
    BackendOptions on, off;
    on.num_cache_blocks = off.num_cache_blocks = static_cast<int64_t>(max_b) * per_seq;
    on.num_threads = off.num_threads = threads;
    off.cpu_linear_rows = false;
    auto rows = make_cpu_backend(m.config, m.weights, on), blas = make_cpu_backend(m.config, m.weights, off);
    const int32_t vocab = static_cast<int32_t>(m.config.vocab_size);
    std::printf("model %s, context %d, %d steps a batch, few-rows kernel %s\n", model.c_str(), context, steps,
                cpu::linear_rows_available() ? "available" : "NOT available (both columns are OpenBLAS)");
    std::printf("| batch | few-rows linears (ms a step) | OpenBLAS (ms a step) | OpenBLAS / few-rows | tokens/s few-rows | tokens/s OpenBLAS |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (int32_t B : batches) {
      double t_rows = 0, t_blas = 0;
      ForwardOutput out;
      for (Backend* be : {rows.get(), blas.get()}) be->forward(batch_of(B, per_seq, bs, 0, context, vocab, true), out);
      for (int32_t s = 0; s < steps; ++s) {
        const ForwardBatch fb = batch_of(B, per_seq, bs, context + s, context + s + 1, vocab, true);
        // Alternate which runs first, so neither always meets the other's cache state.
        Backend* first = s % 2 ? blas.get() : rows.get();
        Backend* second = s % 2 ? rows.get() : blas.get();
        for (Backend* be : {first, second}) {
          if ((only == "rows" && be != rows.get()) || (only == "blas" && be != blas.get())) continue;
          const auto t0 = std::chrono::steady_clock::now();
          be->forward(fb, out);
          (be == rows.get() ? t_rows : t_blas) += seconds_since(t0);
        }
      }
      const double ms_rows = 1e3 * t_rows / steps, ms_blas = 1e3 * t_blas / steps;
      std::printf("| %d | %.2f | %.2f | %.2fx | %.1f | %.1f |\n", B, ms_rows, ms_blas, ms_blas / ms_rows,
                  1e3 * B / ms_rows, 1e3 * B / ms_blas);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
