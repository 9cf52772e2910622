// Test support for the server tests: the built-in demo model (load_model("demo")), engines built
// from it, and a backend wrapper that can fail or slow down on demand.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "forwarding_backend.h"
#include "model/model.h"
#include "server/served_model.h"
#include "tokenizer/byte_tokenizer.h"

namespace inferscale::test_support {

// A backend wrapper for failure and timing tests: forward() sleeps `delay_ms` first (to make
// generations slow enough to cancel), then throws when a poisoned token is in the batch.
class ControlledBackend final : public ForwardingBackend {
 public:
  ControlledBackend(std::unique_ptr<Backend> inner, int32_t poison) : ForwardingBackend(std::move(inner)), poison_(poison) {}
  std::atomic<int> delay_ms{0};
  std::string name() const override { return "controlled"; }
  using ForwardingBackend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    if (const int ms = delay_ms.load()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (int32_t t : b.token_ids)
      if (t == poison_) throw std::runtime_error("poisoned token in the batch");
    ForwardingBackend::forward(b, out);
  }

 private:
  int32_t poison_;
};

// The demo model (a small random Llama over the byte tokenizer, ChatML template), loaded once.
class TestModel {
 public:
  static const Model& demo() {
    static const Model m = load_model("demo");
    return m;
  }
  // One CPU thread: tests run two at a time on a 2-core CI machine. Build it on the thread that
  // runs it (the CPU backend sets that thread's OpenMP thread count).
  std::unique_ptr<Backend> backend(int64_t num_blocks = 64) const {
    BackendOptions bo;
    bo.block_size = 16;
    bo.num_cache_blocks = num_blocks;
    bo.num_threads = 1;
    return make_cpu_backend(demo().config, demo().weights, bo);
  }
  std::unique_ptr<Engine> engine(int64_t num_blocks = 64, std::unique_ptr<Backend> be = nullptr) const {
    EngineOptions eo;
    eo.scheduler.max_num_seqs = 16;
    eo.scheduler.max_num_batched_tokens = 256;
    return std::make_unique<Engine>(be ? std::move(be) : backend(num_blocks), demo().tokenizer, eo);
  }
  server::ServedModel served() const { return server::ServedModel::from(demo()); }
};

}  // namespace inferscale::test_support
