#include "server/auth.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <variant>

#include "server/tenant.h"

namespace inferscale::server {
namespace {

constexpr const char* kApiKeyHeader = "X-API-Key";

ApiError unauthorized(const std::string& message, const char* code) {
  return ApiError(401, "invalid_request_error", message, {}, code);
}

std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string_view::npos) return {};
  const size_t b = s.find_last_not_of(" \t");
  return std::string(s.substr(a, b - a + 1));
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) { return std::tolower(x) == std::tolower(y); });
}

const std::string kMissingMessage =
    "this server needs an API key: send 'Authorization: Bearer KEY' (or 'Authorization: Token KEY', or 'X-API-Key: KEY')";

// The key the request presents, or the 401 to answer.
std::variant<std::string, ApiError> presented_key(const httplib::Request& req) {
  std::optional<std::string> from_auth, from_header;
  const size_t n_auth = req.get_header_value_count("Authorization");
  const size_t n_key = req.get_header_value_count(kApiKeyHeader);
  if (n_auth > 1 || n_key > 1) return unauthorized("give one API key, in one header", "invalid_api_key");
  if (n_auth == 1) {
    const std::string v = trim(req.get_header_value("Authorization"));
    const size_t sp = v.find_first_of(" \t");
    const std::string_view scheme = std::string_view(v).substr(0, sp);
    if (sp == std::string::npos || !(iequals(scheme, "Bearer") || iequals(scheme, "Token")))
      return unauthorized("the Authorization header must be 'Bearer KEY' or 'Token KEY'", "invalid_api_key");
    from_auth = trim(std::string_view(v).substr(sp + 1));
  }
  if (n_key == 1) from_header = trim(req.get_header_value(kApiKeyHeader));
  if (from_auth && from_header && *from_auth != *from_header)
    return unauthorized("the Authorization and X-API-Key headers hold different keys", "invalid_api_key");
  std::string key = from_auth ? *from_auth : from_header.value_or("");
  if (key.empty()) return unauthorized(kMissingMessage, "missing_api_key");
  return key;
}

void erase_header(httplib::Request& req, const char* name) {
  auto [a, b] = req.headers.equal_range(name);
  req.headers.erase(a, b);
}

}  // namespace

std::optional<ApiError> authenticate(httplib::Request& req, const ApiKeys* keys) {
  erase_header(req, kTenantFromKeyHeader);  // only this layer says a tenant comes from a key
  if (!keys) return std::nullopt;
  if (req.path == "/health" && (req.method == "GET" || req.method == "HEAD")) return std::nullopt;
  auto key = presented_key(req);
  if (auto* e = std::get_if<ApiError>(&key)) return *e;
  const std::optional<std::string> tenant = keys->tenant_of(std::get<std::string>(key));
  if (!tenant) return unauthorized("the API key is not valid", "invalid_api_key");
  auto [a, b] = req.headers.equal_range(kTenantHeader);
  for (auto it = a; it != b; ++it)
    if (it->second != *tenant)
      return ApiError(403, "invalid_request_error",
                      fmt::format("the {} header says '{}' but the API key belongs to tenant '{}'", kTenantHeader,
                                  it->second, *tenant),
                      kTenantHeader, "tenant_mismatch");
  req.headers.erase(a, b);
  req.headers.emplace(kTenantHeader, *tenant);
  req.headers.emplace(kTenantFromKeyHeader, "1");
  return std::nullopt;
}

bool is_loopback_host(const std::string& host) {
  if (iequals(host, "localhost")) return true;
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace inferscale::server
