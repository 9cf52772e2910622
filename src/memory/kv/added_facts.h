// The facts written since background encoding started, waiting for their KV to be encoded ahead
// of their first request (MemoryService::queued_captures). Writers' threads (the store's
// listener) add; the engine thread takes, counts the encodings it hands out until they are done,
// and the totals. Thread-safe. Bounded: past kMaxQueued the newest are encoded on demand instead.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {

class AddedFacts {
 public:
  struct Entry {
    std::string tenant, user;
    int64_t id = 0;
  };
  static constexpr size_t kMaxQueued = 1 << 20;

  // Starts queueing; `on_queued` (may be empty) is called on the writer's thread after facts were
  // queued, e.g. to wake the engine thread.
  void enable(std::function<void()> on_queued) {
    std::lock_guard<std::mutex> lock(mu_);
    enabled_ = true;
    on_queued_ = std::move(on_queued);
  }
  // Writer's thread; nothing before enable().
  void add(std::span<const Fact> facts) {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!enabled_) return;
      for (const Fact& f : facts)
        if (queued_.size() < kMaxQueued) queued_.push_back({f.tenant, f.user, f.id});
      wake = on_queued_;
    }
    if (wake) wake();
  }
  // Up to `max` of the oldest, removed from the queue.
  std::vector<Entry> take(int32_t max) {
    std::vector<Entry> out;
    std::lock_guard<std::mutex> lock(mu_);
    while (!queued_.empty() && static_cast<int32_t>(out.size()) < max) {
      out.push_back(std::move(queued_.front()));
      queued_.pop_front();
    }
    return out;
  }
  // Facts queued, and encodings handed out and not done.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_.size() + static_cast<size_t>(in_flight_.load());
  }
  bool has_queued() const {  // facts queued and not yet handed out
    std::lock_guard<std::mutex> lock(mu_);
    return !queued_.empty();
  }
  // Engine thread: an encoding handed out, and its end (encoded: its KV was kept).
  void started() { ++in_flight_; }
  void ended(bool encoded) {  // counted before it leaves in_flight: size() 0 means encoded() is final
    if (encoded) ++encoded_;
    --in_flight_;
  }
  void skipped() { ++skipped_; }  // engine thread: resident, in a file, deleted, or no room
  int64_t encoded() const { return encoded_.load(); }
  int64_t num_skipped() const { return skipped_; }

 private:
  mutable std::mutex mu_;
  std::deque<Entry> queued_;           // guarded by mu_
  bool enabled_ = false;               // guarded by mu_
  std::function<void()> on_queued_;    // guarded by mu_
  std::atomic<int64_t> in_flight_{0};  // written on the engine thread
  std::atomic<int64_t> encoded_{0};    // written on the engine thread
  int64_t skipped_ = 0;                // engine thread
};

}  // namespace inferscale
