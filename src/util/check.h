// Errors in two tiers: IS_CHECK for conditions that bad input or a broken invariant can break
// (throws inferscale::Error naming file and line), and CUDA_CHECK (backend/cuda) on every CUDA call.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace inferscale {

// What went wrong, for callers that map errors to user-facing answers (HTTP status, CLI exit code).
enum class ErrorKind {
  kInternal,      // a broken invariant: a bug
  kInvalidInput,  // the caller's request or file is malformed
  kNotFound,      // a named thing (file, tensor, user, fact) does not exist
  kUnsupported,   // well-formed, but a feature this build does not support
  kResource,      // out of memory, KV blocks or disk
  kUnavailable,   // a service this needs (the memory store's database server) cannot be reached now
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
[[noreturn]] inline void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw Error(kind, kind == ErrorKind::kInternal ? fmt::format("{} ({}:{})", msg, base, line) : msg);
}
}  // namespace detail
}  // namespace inferscale

// IS_THROW(kind, "format {}", args...): throw a typed error. Internal errors carry file:line.
#define IS_THROW(kind, ...) \
  ::inferscale::detail::throw_error(::inferscale::ErrorKind::kind, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// IS_CHECK(cond, "format {}", args...): invariant check; throws an internal error with file:line.
#define IS_CHECK(cond, ...)                   \
  do {                                        \
    if (!(cond)) [[unlikely]] {               \
      IS_THROW(kInternal, "check failed: " #cond ": " __VA_ARGS__); \
    }                                         \
  } while (0)

// IS_REQUIRE(cond, kind, "format {}", args...): validation of outside input; the message names the problem.
#define IS_REQUIRE(cond, kind, ...)           \
  do {                                        \
    if (!(cond)) [[unlikely]] {               \
      IS_THROW(kind, __VA_ARGS__);            \
    }                                         \
  } while (0)
