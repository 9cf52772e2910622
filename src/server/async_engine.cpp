#include "server/async_engine.h"

#include <spdlog/spdlog.h>

#include "server/api_error.h"
#include "util/check.h"

namespace inferscale::server {
namespace {

std::exception_ptr shutting_down() {
  return std::make_exception_ptr(Unavailable(Unavailable::Why::kShuttingDown, "the server is shutting down"));
}

}  // namespace

AsyncEngine::AsyncEngine(EngineFactory make_engine, AsyncEngineOptions opts) : opts_(opts), wake_(std::make_shared<Wake>()) {
  IS_REQUIRE(opts_.max_pending >= 1, kInvalidInput, "max_pending must be at least 1, got {}", opts_.max_pending);
  std::promise<void> ready;
  std::future<void> built = ready.get_future();
  thread_ = std::thread([this, &make_engine, &ready] { run(make_engine, ready); });
  try {
    built.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

AsyncEngine::~AsyncEngine() { shutdown(); }

std::shared_ptr<RequestStream> AsyncEngine::submit(Submission s) {
  std::weak_ptr<Wake> weak = wake_;
  auto stream = std::make_shared<RequestStream>([weak] {
    if (auto w = weak.lock()) {
      {
        std::lock_guard lk(w->mu);
        w->poked = true;
      }
      w->cv.notify_all();
    }
  });
  {
    std::lock_guard lk(wake_->mu);
    if (stopping_) std::rethrow_exception(shutting_down());
    if (num_pending_ >= opts_.max_pending)
      throw Unavailable(Unavailable::Why::kOverloaded,
                        fmt::format("the server is overloaded: {} requests are in flight (limit {}); retry later",
                                    num_pending_, opts_.max_pending));
    ++num_pending_;
    incoming_.push_back(Pending{std::move(s), stream});
    has_incoming_.store(true, std::memory_order_release);
  }
  wake_->cv.notify_all();
  return stream;
}

bool AsyncEngine::stopping() const {
  std::lock_guard lk(wake_->mu);
  return stopping_;
}

void AsyncEngine::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard serial(shutdown_mu_);
  if (!thread_.joinable()) return;
  {
    std::unique_lock lk(wake_->mu);
    stopping_ = true;
    wake_->cv.notify_all();
    // Drain: the engine thread exits by itself once nothing is live.
    wake_->cv.wait_for(lk, grace, [&] { return exited_; });
    aborting_ = true;
  }
  wake_->cv.notify_all();
  thread_.join();
}

void AsyncEngine::request_idle_work() {
  if (!opts_.idle_work) return;
  {
    std::lock_guard lk(wake_->mu);
    wake_->idle_work = true;
  }
  wake_->cv.notify_all();
}

void AsyncEngine::run_idle_work() {
  {
    std::lock_guard lk(wake_->mu);
    if (!wake_->idle_work || !incoming_.empty()) return;  // a submission goes first
    wake_->idle_work = false;
  }
  bool more = false;
  try {
    more = opts_.idle_work(*engine_);
  } catch (const std::exception& e) {
    spdlog::warn("engine: idle work failed: {}", e.what());
  }
  if (more) {
    std::lock_guard lk(wake_->mu);
    wake_->idle_work = true;
  }
}

AsyncEngineStats AsyncEngine::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

// A request's slot is freed before its stream ends (its last output, error or cancellation):
// once the HTTP thread can see the end, and so the client can have its answer and send the next
// request, the slot is free again. Freed after, a client that sends requests one at a time could
// be refused as overloaded while the engine thread was still between the two steps.
void AsyncEngine::finish_request() {
  std::lock_guard lk(wake_->mu);
  --num_pending_;
}

void AsyncEngine::run(const EngineFactory& make_engine, std::promise<void>& ready) {
  try {
    engine_ = make_engine();
    IS_CHECK(engine_ != nullptr, "the engine factory returned null");
    max_model_len_ = engine_->max_model_len();
    block_size_ = engine_->blocks().block_size();
    num_blocks_ = engine_->blocks().num_blocks();
    if (opts_.on_start) opts_.on_start(*engine_);
    // Submissions that arrive while a forward runs are admitted beside it (Engine::set_intake: on
    // an overlapping backend the engine thread polls for the length of each forward, taking a
    // core), so they run one step sooner than if admitted between steps.
    engine_->set_intake([this] { return take_incoming_beside_forward(); });
    publish_stats();
    wake_->idle_work = static_cast<bool>(opts_.idle_work);  // once at start (the engine is idle)
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();  // `make_engine` and `ready` die with the constructor after this
  serve();
}

void AsyncEngine::serve() {
  for (;;) {
    std::vector<Pending> incoming;
    bool stopping = false, aborting = false;
    {
      std::unique_lock lk(wake_->mu);
      wake_->cv.wait(lk, [&] {
        return wake_->poked || !incoming_.empty() || stopping_ || aborting_ || engine_->has_unfinished() ||
               wake_->idle_work;
      });
      wake_->poked = false;
      incoming.swap(incoming_);
      has_incoming_.store(false, std::memory_order_relaxed);
      stopping = stopping_;
      aborting = aborting_;
    }

    // Cancellations first: a client that went away must not cost another step.
    for (auto it = live_.begin(); it != live_.end();) {
      if (aborting || it->second.stream->cancelled()) {
        engine_->abort(it->first);
        finish_request();  // before the stream ends: see finish_request()
        if (aborting && !it->second.stream->cancelled()) it->second.stream->fail(shutting_down());
        else it->second.stream->end_cancelled();
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    admit(incoming, aborting);

    if (!aborting && engine_->has_unfinished()) step_once();
    if (!aborting && !stopping && !engine_->has_unfinished())
      run_idle_work();  // nothing waits or runs: low-priority work, one bounded piece
    publish_stats();

    if (aborting || (stopping && live_.empty() && !engine_->has_unfinished())) {
      std::lock_guard lk(wake_->mu);
      if (incoming_.empty()) {  // submit refuses once stopping_, so nothing more can arrive
        exited_ = true;
        wake_->cv.notify_all();
        return;
      }
    }
  }
}

void AsyncEngine::admit(std::vector<Pending>& incoming, bool aborting) {
  for (Pending& p : incoming) {
    if (p.stream->cancelled()) {
      finish_request();
      p.stream->end_cancelled();
      continue;
    }
    if (aborting) {
      finish_request();
      p.stream->fail(shutting_down());
      continue;
    }
    try {
      if (p.sub.memory) {
        // Accepted by the output of the engine's step that finds the prompt ready
        // (RequestOutput::admitted); rejected through that step's outputs (RequestOutput::error).
        const int64_t id = engine_->add_memory_request(std::move(p.sub.memory), p.sub.sampling, p.sub.cache_salt);
        live_.emplace(id, Live{p.stream});
        continue;
      }
      const int64_t id = engine_->add_request(std::move(p.sub.prompt), p.sub.sampling, std::nullopt, p.sub.cache_salt);
      live_.emplace(id, Live{p.stream});
      p.stream->accept();
    } catch (...) {
      finish_request();
      p.stream->fail(std::current_exception());
    }
  }
}

bool AsyncEngine::take_incoming_beside_forward() {
  if (!has_incoming_.load(std::memory_order_acquire)) return false;
  std::vector<Pending> incoming;
  {
    std::lock_guard lk(wake_->mu);
    if (aborting_) return false;  // the serve loop ends them
    incoming.swap(incoming_);
    has_incoming_.store(false, std::memory_order_relaxed);
  }
  if (incoming.empty()) return false;
  admit(incoming, false);
  return true;
}

void AsyncEngine::step_once() {
  std::vector<RequestOutput> outs;
  try {
    outs = engine_->step();
  } catch (const std::exception& e) {
    ++step_errors_;
    spdlog::error("engine step failed; failing {} live request(s): {}", live_.size(), e.what());
    fail_all_live(std::current_exception());
    return;
  } catch (...) {
    ++step_errors_;
    spdlog::error("engine step failed with a non-standard exception; failing {} live request(s)", live_.size());
    fail_all_live(std::current_exception());
    return;
  }
  for (RequestOutput& o : outs) {
    auto it = live_.find(o.id);
    if (it == live_.end()) continue;  // aborted while its step was running cannot happen; be safe
    if (o.admitted) {  // its memory resolved: the prompt is final, the request will be served
      it->second.stream->accept();
      continue;
    }
    const bool finished = o.finished;
    if (finished) finish_request();
    if (o.error) it->second.stream->fail(o.error);  // rejected at admission: never accepted
    else it->second.stream->push(std::move(o));
    if (finished) live_.erase(it);
  }
}

void AsyncEngine::fail_all_live(std::exception_ptr e) {
  // We cannot tell which requests the failed step touched: fail them all so none waits forever,
  // and abort them in the engine so their KV blocks return to the free list; the memory captures
  // it was computing go too.
  engine_->drop_captures();
  for (auto& [id, live] : live_) {
    try {
      engine_->abort(id);
    } catch (const std::exception& ex) {
      spdlog::error("aborting request {} after a failed step also failed: {}", id, ex.what());
    }
    finish_request();
    live.stream->fail(e);
  }
  live_.clear();
}

void AsyncEngine::publish_stats() {
  AsyncEngineStats s;
  s.engine = engine_->stats();
  s.kv_blocks_total = engine_->blocks().num_blocks();
  s.kv_blocks_free = engine_->blocks().num_free();
  s.num_waiting = static_cast<int64_t>(engine_->scheduler().num_waiting());
  s.num_running = static_cast<int64_t>(engine_->scheduler().num_running());
  s.step_errors = step_errors_;
  {
    std::lock_guard lk(wake_->mu);
    s.num_pending = num_pending_;
  }
  std::lock_guard lk(stats_mu_);
  stats_ = s;
}

}  // namespace inferscale::server
