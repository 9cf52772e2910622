// One request's outputs on their way from the engine thread to the HTTP thread that serves it.
//
// Threading: exactly one producer (the AsyncEngine's engine thread: accept/push/fail) and one
// consumer (the HTTP thread: poll/cancel). Everything is guarded by the stream's own mutex; the
// consumer never touches the Engine. cancel() may come from any thread at any time, also after
// the request finished or the AsyncEngine was shut down (it is then a no-op).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace inferscale::server {

class RequestStream {
 public:
  // `wake` tells the engine thread to look at cancellations; it must stay callable for the
  // stream's whole life (AsyncEngine passes a callable that tolerates its own shutdown).
  explicit RequestStream(std::function<void()> wake) : wake_(std::move(wake)) {}

  struct Poll {
    std::vector<RequestOutput> outputs;  // deltas in order; the last one has finished set when done
    bool accepted = false;               // the engine validated and queued the request
    bool done = false;                   // finished, aborted or failed: nothing more will come
    std::exception_ptr error;            // set when the request was rejected or failed
  };

  // ---- consumer (HTTP thread) ----
  // Waits up to `timeout` for news (acceptance, outputs, the end) and takes everything queued.
  Poll poll(std::chrono::milliseconds timeout);
  // Asks the engine thread to abort the request (client gone). Idempotent.
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // ---- producer (engine thread) ----
  void accept();
  void push(RequestOutput out);         // out.finished ends the stream
  void fail(std::exception_ptr error);  // ends the stream with an error
  void end_cancelled();                 // ends the stream after cancel(): no more outputs

 private:
  std::function<void()> wake_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool accepted_ = false;
  bool accepted_reported_ = false;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace inferscale::server
