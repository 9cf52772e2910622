// AsyncEngine: runs one Engine on one dedicated engine thread and lets any thread submit requests.
//
// Ownership and threading rules:
//   - The engine thread is the only thread that ever touches the Engine (model, KV cache,
//     scheduler). Other threads talk to it through `submit` (a bounded queue) and through each
//     request's RequestStream (outputs back, cancel forward).
//   - When there is nothing to do the engine thread sleeps on a condition variable; submit,
//     cancel and shutdown wake it. It never spins.
//   - An exception thrown by Engine::step() fails every request that was live in the engine
//     (their streams get the error, the engine aborts them and frees their blocks) and the
//     thread keeps serving. Exceptions from add_request reject just that request.
//   - Statistics are published by the engine thread after every iteration into a snapshot that
//     any thread may read (stats()).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "server/request_stream.h"

namespace inferscale::server {

struct AsyncEngineOptions {
  // Requests submitted and not yet finished (queued, waiting or running); past it submit throws
  // Unavailable (kOverloaded: HTTP 429 with Retry-After).
  int64_t max_pending = 256;
  // Low-priority work (background fact encoding): run on the engine thread only while no request
  // is waiting or running, once at start and again after each request_idle_work(); returns
  // whether more remains (then it runs again when still idle). Each call should return within
  // tens of milliseconds: a request arriving meanwhile waits for it. What it throws is logged.
  std::function<bool(Engine&)> idle_work;
  // Runs once on the engine thread when the engine is built, before the constructor returns (so
  // before any request or write the server takes): e.g. starting the memory service's queueing.
  // What it throws fails the constructor.
  std::function<void(Engine&)> on_start;
};

// What one submit asks for: token ids and sampling; or, instead of ids, a request's memory that
// the engine's connector plans at admission (memory_connector.h): retrieval, composition and the
// encoding of a cold user's facts then happen inside the engine's steps, and the stream is
// accepted once the prompt is ready (what the plan throws rejects it).
struct Submission {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::shared_ptr<RequestMemory> memory;
  // The prefix-cache salt (Engine::add_request): the server's is the request's tenant.
  uint64_t cache_salt = 0;
};

struct AsyncEngineStats {
  EngineStats engine;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;
  int64_t num_waiting = 0;   // in the engine's scheduler
  int64_t num_running = 0;
  int64_t num_pending = 0;   // submitted and not yet finished
  int64_t step_errors = 0;   // step() calls that threw
};

class AsyncEngine {
 public:
  using EngineFactory = std::function<std::unique_ptr<Engine>()>;
  // Builds the Engine on the engine thread (so that thread-bound state, such as OpenMP's thread
  // count set by the CPU backend or a device context, belongs to the thread that runs it) and
  // returns once it is ready. What the factory throws is rethrown here.
  AsyncEngine(EngineFactory make_engine, AsyncEngineOptions opts = {});
  // Shuts down with no grace (aborts whatever is live) and joins the engine thread.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Thread-safe. Queues the request and returns its stream at once; the engine thread validates
  // it (RequestStream::Poll::accepted or error). Throws Unavailable (api_error.h) when the queue
  // is full or the engine is shutting down.
  std::shared_ptr<RequestStream> submit(Submission s);

  // Stops taking requests, lets live ones finish for up to `grace`, aborts the rest (their
  // streams fail with Unavailable kShuttingDown) and joins the engine thread. Idempotent.
  void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  AsyncEngineStats stats() const;
  // Thread-safe: shutdown() has begun (new requests are refused).
  bool stopping() const;
  // Thread-safe: there is idle work to do (AsyncEngineOptions::idle_work).
  void request_idle_work();

  // Fixed once constructed, safe from any thread.
  int32_t max_model_len() const { return max_model_len_; }
  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t max_pending() const { return opts_.max_pending; }

 private:
  struct Live {
    std::shared_ptr<RequestStream> stream;
  };
  struct Pending {
    Submission sub;
    std::shared_ptr<RequestStream> stream;
  };
  // State shared with the streams' cancel callbacks, which may outlive this object.
  struct Wake {
    std::mutex mu;
    std::condition_variable cv;
    bool poked = false;  // a stream was cancelled
    bool idle_work = false;  // AsyncEngineOptions::idle_work has something to do
  };

  void run(const EngineFactory& make_engine, std::promise<void>& ready);  // the engine thread
  void serve();
  // Ends cancelled submissions (all when aborting) and adds the rest to the engine: accepted at
  // once, or, with memory, when the engine has planned its prompt.
  void admit(std::vector<Pending>& incoming, bool aborting);
  // Engine::set_intake's: the submissions that arrived while a forward runs, admitted beside it.
  bool take_incoming_beside_forward();
  void step_once();
  void run_idle_work();
  void fail_all_live(std::exception_ptr e);
  void finish_request();                   // one pending request fewer
  void publish_stats();

  std::unique_ptr<Engine> engine_;         // engine thread only
  std::unordered_map<int64_t, Live> live_; // engine thread only: engine id -> stream
  const AsyncEngineOptions opts_;
  int32_t max_model_len_ = 0;  // written by the engine thread before the constructor returns
  int32_t block_size_ = 0;
  int64_t num_blocks_ = 0;

  // Guarded by wake_->mu.
  std::shared_ptr<Wake> wake_;
  std::vector<Pending> incoming_;
  std::atomic<bool> has_incoming_{false};  // !incoming_.empty(), read without the lock (the intake polls it)
  int64_t num_pending_ = 0;
  bool stopping_ = false;   // no new submissions; exit when idle
  bool aborting_ = false;   // abort everything live and exit
  bool exited_ = false;

  mutable std::mutex stats_mu_;
  AsyncEngineStats stats_;
  int64_t step_errors_ = 0;  // engine thread only

  std::mutex shutdown_mu_;   // serializes shutdown() callers
  std::thread thread_;
};

}  // namespace inferscale::server
