// The path of a request target as percent-decoded segments. Segments are split BEFORE decoding,
// so a user named "a/b" (sent as "a%2Fb") stays one segment: httplib's own `req.path` is decoded
// first and cannot tell the two apart.
#pragma once
#include <httplib.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale::server {

// "/v1/memory/users/a%2Fb/facts?limit=3" -> {"v1", "memory", "users", "a/b", "facts"}. The query is
// dropped; one trailing '/' is ignored. Throws ApiError 400 on an invalid percent-escape.
std::vector<std::string> path_segments(std::string_view target);

// An integer query parameter in [lo, hi], or nullopt when absent; 400 naming it otherwise.
std::optional<int64_t> query_int(const httplib::Request& req, const char* name, int64_t lo, int64_t hi);

// Whether `segs` has `shape`: '/'-separated literal segments and {name} parameters
// ("users/{user}/facts/{id}"); then `params` holds the parameters' segments in order.
bool match_path(std::string_view shape, std::span<const std::string> segs, std::vector<std::string>& params);

// The answer to a path no route serves with the request's method: 404 unknown_route when no
// route has the path (`allowed` empty), else 405 method_not_allowed naming the allowed methods
// (also in the Allow header, set on `res`). Always throws ApiError.
[[noreturn]] void throw_unrouted(const httplib::Request& req, httplib::Response& res,
                                 const std::vector<std::string_view>& allowed);

// One entry of a router's table: a method, a path shape whose {name} segments are parameters, and
// the handler, which takes the router's own per-request state (its `Call`).
template <class Call>
struct Route {
  std::string_view method;
  std::string_view shape;
  void (*run)(Call&);
};

// The route of a table (each entry with `method` and `shape`, string_views) that has `segs` and the
// request's method (HEAD as GET; the first such entry), its {parameters} in `params`; throws
// throw_unrouted's 404 / 405 when none has both.
template <class Route>
const Route& find_route(std::span<const Route> routes, std::span<const std::string> segs, const httplib::Request& req,
                        httplib::Response& res, std::vector<std::string>& params) {
  const std::string_view method = req.method == "HEAD" ? std::string_view("GET") : std::string_view(req.method);
  const Route* found = nullptr;
  std::vector<std::string_view> allowed;
  std::vector<std::string> bound;
  for (const Route& r : routes) {
    if (!match_path(r.shape, segs, bound)) continue;
    allowed.push_back(r.method);
    if (!found && r.method == method) {
      found = &r;
      params = bound;
    }
  }
  if (!found) throw_unrouted(req, res, allowed);
  return *found;
}

}  // namespace inferscale::server
