#include "util/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace inferscale {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

Progress::Progress(std::string label, int64_t total) : Progress(std::move(label), total, Options{}) {}

Progress::Progress(std::string label, int64_t total, Options opts)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 0)), opts_(std::move(opts)) {
  tty_ = opts_.tty ? *opts_.tty : (opts_.out != nullptr && ::isatty(::fileno(opts_.out)) == 1);
  start_ = now();
}

Progress::~Progress() { finish(); }

double Progress::now() const {
  if (opts_.clock) return opts_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Progress::add(int64_t n) {
  std::lock_guard lock(mu_);
  done_ += n;
  maybe_draw_locked(false);
}

void Progress::set(int64_t done) {
  std::lock_guard lock(mu_);
  done_ = done;
  maybe_draw_locked(false);
}

int64_t Progress::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

std::string Progress::line() const {
  std::lock_guard lock(mu_);
  return line_locked(now());
}

void Progress::finish() {
  std::lock_guard lock(mu_);
  if (finished_) return;
  maybe_draw_locked(true);
  if (tty_ && opts_.out != nullptr) {
    std::fputc('\n', opts_.out);
    std::fflush(opts_.out);
  }
  finished_ = true;
}

std::string Progress::line_locked(double t) const {
  const double elapsed = std::max(t - start_, 0.0);
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  const std::string unit = opts_.unit.empty() ? "/s" : " " + opts_.unit + "/s";
  std::string s = label_.empty() ? std::string() : label_ + "  ";
  if (total_ > 0) {
    const double frac = std::clamp(static_cast<double>(done_) / static_cast<double>(total_), 0.0, 1.0);
    constexpr int kBar = 20;
    const int filled = static_cast<int>(frac * kBar);
    s += fmt::format("{}/{}  {:3.0f}% |{}{}|", done_, total_, frac * 100.0, std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kBar - filled), ' '));
  } else {
    s += fmt::format("{}", done_);
  }
  s += fmt::format("  {:.1f}{}", rate, unit);
  if (finished_ || (total_ > 0 && done_ >= total_)) {
    s += fmt::format("  in {}", format_duration(elapsed));
  } else if (total_ > 0 && rate > 0) {
    s += fmt::format("  ETA {}", format_duration(static_cast<double>(total_ - done_) / rate));
  }
  return s;
}

void Progress::maybe_draw_locked(bool force) {
  if (finished_ || opts_.out == nullptr) return;
  const double t = now();
  const double interval = tty_ ? opts_.tty_interval_s : opts_.plain_interval_s;
  if (!force && t - last_draw_ < interval) return;
  last_draw_ = t;
  std::string s = line_locked(t);
  if (tty_) {
    // Pad over the previous, longer line; '\r' returns to its start.
    const size_t width = s.size();
    if (width < last_width_) s.append(last_width_ - width, ' ');
    last_width_ = width;
    std::fprintf(opts_.out, "\r%s", s.c_str());
  } else {
    std::fprintf(opts_.out, "%s\n", s.c_str());
  }
  std::fflush(opts_.out);
}

}  // namespace inferscale
