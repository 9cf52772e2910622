// OpenAI-style API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
//
// Every failure a client can see goes through here. ApiError is thrown by the request parser and
// the handlers; everything else (inferscale::Error from the tokenizer, template or engine, or any
// other exception) becomes an ApiError in api_error_from(), the one place that maps error kinds
// to HTTP statuses.
#pragma once
#include <exception>
#include <stdexcept>
#include <string>

#include "util/check.h"

namespace inferscale::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "not_found_error", "server_error", ...
  std::string param;  // the offending request field ("" = none)
  std::string code;   // machine-readable detail ("" = none)
  int retry_after_s = 0;  // > 0: sent as the Retry-After header (seconds)

  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}

  // The JSON body.
  std::string body() const;
};

// The server cannot take a request now, and says when to try again: too many in flight
// (--max-pending) or shutting down. An Error of kind kResource to code that does not look closer.
class Unavailable : public Error {
 public:
  enum class Why { kOverloaded, kShuttingDown };
  Unavailable(Why why, const std::string& message) : Error(ErrorKind::kResource, message), why_(why) {}
  Why why() const { return why_; }

 private:
  Why why_;
};

// 400 invalid_request_error naming the field.
ApiError bad_request(const std::string& message, const std::string& param = {}, const std::string& code = {});

// The one mapping from any exception to an API error:
//   ApiError                     as it is
//   Error kInvalidInput          400 invalid_request_error
//   Error kUnsupported           400 invalid_request_error, code "unsupported"
//   Error kNotFound              404 not_found_error
//   Unavailable kOverloaded      429 rate_limit_error, code "overloaded", Retry-After 1
//   Unavailable kShuttingDown    503 server_error, code "shutting_down", Retry-After 5
//   Error kResource              503 server_error, code "overloaded" (out of KV blocks, disk, ...)
//   Error kUnavailable           503 server_error, code "store_unavailable", Retry-After 1 (the
//                                memory store's database cannot be reached; it reconnects by itself)
//   Error kInternal, the rest    500 server_error (a bug: the message is logged)
ApiError api_error_from(std::exception_ptr e);

}  // namespace inferscale::server
