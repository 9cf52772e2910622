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

namespace inferscale::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "not_found_error", "server_error", ...
  std::string param;  // the offending request field ("" = none)
  std::string code;   // machine-readable detail ("" = none)

  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)) {}

  // The JSON body.
  std::string body() const;
};

// 400 invalid_request_error naming the field.
ApiError bad_request(const std::string& message, const std::string& param = {}, const std::string& code = {});

// The one mapping from any exception to an API error:
//   ApiError                     as it is
//   Error kInvalidInput          400 invalid_request_error
//   Error kUnsupported           400 invalid_request_error, code "unsupported"
//   Error kNotFound              404 not_found_error
//   Error kResource              503 server_error, code "overloaded" (queue full, out of KV blocks)
//   Error kInternal, the rest    500 server_error (a bug: the message is logged)
ApiError api_error_from(std::exception_ptr e);

}  // namespace inferscale::server
