// A progress report for long loops: count, percentage, rate and ETA on stderr.
//
//   label  1234/5882  21% |#####               |  3456.7/s  ETA 0:01
//
// On a terminal the line is redrawn in place ('\r') at most every `tty_interval_s`; otherwise
// (CI logs, pipes) a plain line is printed at most every `plain_interval_s`. finish() always prints
// the final line. Thread-safe: several workers may add() to one Progress.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace inferscale {

class Progress {
 public:
  struct Options {
    FILE* out = stderr;
    std::optional<bool> tty;            // unset: isatty(out)
    double tty_interval_s = 0.2;        // at most 5 redraws a second
    double plain_interval_s = 5.0;
    std::string unit = "";              // after the rate: "facts" -> "3456.7 facts/s"
    std::function<double()> clock;      // seconds, monotonic; unset: steady_clock (tests inject one)
  };

  // total = 0 when unknown (no percentage, bar or ETA).
  Progress(std::string label, int64_t total);
  Progress(std::string label, int64_t total, Options opts);
  // Calls finish() if it has not been called.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(int64_t n = 1);
  void set(int64_t done);
  // Prints the final line (and a newline on a terminal). Idempotent.
  void finish();

  int64_t done() const;
  // The line as it would be drawn now, without '\r' or '\n' (for tests and logs).
  std::string line() const;

 private:
  double now() const;
  std::string line_locked(double t) const;
  void maybe_draw_locked(bool force);

  std::string label_;
  int64_t total_;
  Options opts_;
  bool tty_;
  mutable std::mutex mu_;
  int64_t done_ = 0;
  double start_ = 0.0;
  double last_draw_ = -1e300;
  size_t last_width_ = 0;
  bool finished_ = false;
};

// "0:07", "12:03", "1:02:03".
std::string format_duration(double seconds);

}  // namespace inferscale
