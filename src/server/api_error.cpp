#include "server/api_error.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "util/check.h"

namespace inferscale::server {

std::string ApiError::body() const {
  nlohmann::json j = {{"error",
                       {{"message", what()},
                        {"type", type},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
  // Messages can quote client bytes: never let invalid UTF-8 turn an error into a crash.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

ApiError api_error_from(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const ApiError& a) {
    return a;
  } catch (const Unavailable& u) {
    // 429 for overload: OpenAI clients retry it (honouring Retry-After); a 503 for the shutdown,
    // which a load balancer takes as "this instance is going away".
    const bool busy = u.why() == Unavailable::Why::kOverloaded;
    ApiError a = busy ? ApiError(429, "rate_limit_error", u.what(), {}, "overloaded")
                      : ApiError(503, "server_error", u.what(), {}, "shutting_down");
    a.retry_after_s = busy ? 1 : 5;
    return a;
  } catch (const Error& err) {
    switch (err.kind()) {
      case ErrorKind::kInvalidInput: return bad_request(err.what());
      case ErrorKind::kUnsupported: return bad_request(err.what(), {}, "unsupported");
      case ErrorKind::kNotFound: return ApiError(404, "not_found_error", err.what());
      case ErrorKind::kResource: return ApiError(503, "server_error", err.what(), {}, "overloaded");
      case ErrorKind::kUnavailable: {
        ApiError a(503, "server_error", err.what(), {}, "store_unavailable");
        a.retry_after_s = 1;
        return a;
      }
      case ErrorKind::kInternal: break;
    }
    spdlog::error("internal error: {}", err.what());
    return ApiError(500, "server_error", std::string("internal error: ") + err.what());
  } catch (const std::exception& ex) {
    spdlog::error("unexpected exception: {}", ex.what());
    return ApiError(500, "server_error", std::string("internal error: ") + ex.what());
  } catch (...) {
    spdlog::error("unexpected non-standard exception");
    return ApiError(500, "server_error", "internal error");
  }
}

}  // namespace inferscale::server
