#include "server/url_path.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "server/api_error.h"

namespace inferscale::server {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
    if (lo < 0) throw bad_request("the request path holds an invalid percent-escape", {}, "invalid_path");
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

std::vector<std::string> path_segments(std::string_view target) {
  std::string_view path = target.substr(0, target.find_first_of("?#"));
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  std::vector<std::string> out;
  if (path.empty()) return out;
  for (size_t start = 0;;) {
    const size_t end = path.find('/', start);
    out.push_back(percent_decode(path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::optional<int64_t> query_int(const httplib::Request& req, const char* name, int64_t lo, int64_t hi) {
  if (!req.has_param(name)) return std::nullopt;
  const std::string s = req.get_param_value(name);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
    throw bad_request(fmt::format("query parameter '{}' must be an integer between {} and {}, got '{}'", name, lo, hi, s), name);
  return v;
}

bool match_path(std::string_view shape, std::span<const std::string> segs, std::vector<std::string>& params) {
  std::vector<std::string> bound;
  size_t i = 0;
  for (size_t start = 0; start <= shape.size(); ++i) {
    const size_t end = std::min(shape.find('/', start), shape.size());
    const std::string_view part = shape.substr(start, end - start);
    if (i >= segs.size()) return false;
    if (part.size() > 2 && part.front() == '{' && part.back() == '}') bound.push_back(segs[i]);
    else if (part != segs[i]) return false;
    start = end + 1;
  }
  if (i != segs.size()) return false;
  params = std::move(bound);
  return true;
}

void throw_unrouted(const httplib::Request& req, httplib::Response& res, const std::vector<std::string_view>& allowed) {
  if (allowed.empty())
    throw ApiError(404, "not_found_error", fmt::format("unknown route: {} {}", req.method, req.path), {}, "unknown_route");
  res.set_header("Allow", fmt::format("{}", fmt::join(allowed, ", ")));
  throw ApiError(405, "invalid_request_error",
                 fmt::format("{} is not allowed on {}; use {}", req.method, req.path, fmt::join(allowed, " or ")), {},
                 "method_not_allowed");
}

}  // namespace inferscale::server
