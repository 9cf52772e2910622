// The host cost of scoring: compute_logprobs (engine/logprobs.h) over R rows of V logits, as the
// engine runs it for a step that carries prompt_logprobs (rows in parallel on the engine thread's
// OpenMP threads). Prints ns per logit and ms per step for the vocabularies of SmolLM2 (49,152),
// Qwen2.5 (152,064) and Llama 3 (128,256).
//
// Usage: bench_logprobs [rows=1500] [top_n=5]. CPU time per logit is printed beside the wall time:
// on a shared machine the wall time of the parallel loop says little.
#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/logprobs.h"

using namespace inferscale;

int main(int argc, char** argv) {
  const int64_t R = argc > 1 ? std::atoll(argv[1]) : 1500;
  const int32_t top_n = argc > 2 ? std::atoi(argv[2]) : 5;
  for (int64_t V : {49152, 128256, 152064}) {
    std::vector<float> logits(static_cast<size_t>(R * V));  // [R, V]
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (float& x : logits) x = nd(rng);
    for (int threads : {1, omp_get_max_threads()}) {
      std::vector<LogprobEntry> out(static_cast<size_t>(R));
      timespec c0{}, c1{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (int64_t r = 0; r < R; ++r)
        out[static_cast<size_t>(r)] = compute_logprobs({logits.data() + r * V, static_cast<size_t>(V)},
                                                       static_cast<int32_t>((r * 7919) % V), top_n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
      const double cpu = static_cast<double>(c1.tv_sec - c0.tv_sec) + 1e-9 * static_cast<double>(c1.tv_nsec - c0.tv_nsec);
      std::printf("V %7lld  rows %lld  top %d  threads %2d: %7.1f ms per step (wall), %.2f ns of CPU per logit\n",
                  static_cast<long long>(V), static_cast<long long>(R), top_n, threads, s * 1e3,
                  cpu * 1e9 / static_cast<double>(R * V));
      if (threads == omp_get_max_threads()) break;
    }
  }
  return 0;
}
