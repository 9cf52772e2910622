#include "server/tenant.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "memory/store/fact_store.h"
#include "server/api_error.h"

namespace inferscale::server {

void check_name(std::string_view name, const std::string& param) {
  if (auto problem = name_problem(name))
    throw bad_request(fmt::format("'{}' {} (a name must be 1 to {} bytes without control characters)", param, *problem,
                                  FactStore::kMaxNameBytes),
                      param, "invalid_name");
}

std::string request_tenant(const httplib::Request& req) {
  if (!req.has_header(kTenantHeader)) return kDefaultTenant;
  std::string t = req.get_header_value(kTenantHeader);
  check_name(t, kTenantHeader);
  return t;
}

void apply_tenant_header(const httplib::Request& req, MemorySpec& spec) {
  if (!req.has_header(kTenantHeader)) return;
  const std::string t = request_tenant(req);
  if (!spec.tenant.empty() && spec.tenant != t) {
    if (req.has_header(kTenantFromKeyHeader))
      throw ApiError(403, "invalid_request_error",
                     fmt::format("'memory.tenant' is '{}' but the API key belongs to tenant '{}'", spec.tenant, t),
                     "memory.tenant", "tenant_mismatch");
    throw bad_request(fmt::format("'memory.tenant' is '{}' but the {} header says '{}'", spec.tenant, kTenantHeader, t),
                      "memory.tenant");
  }
  spec.tenant = t;
}

std::string generation_tenant(const httplib::Request& req, const MemorySpec* memory) {
  if (memory) return memory->resolved().tenant;
  return req.has_header(kTenantHeader) ? req.get_header_value(kTenantHeader) : std::string(kDefaultTenant);
}

uint64_t tenant_cache_salt(std::string_view tenant) { return XXH3_64bits(tenant.data(), tenant.size()) | 1; }

}  // namespace inferscale::server
