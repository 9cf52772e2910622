// Tenants and user names on the HTTP side.
//
// A request's tenant is the header X-InferScale-Tenant ("default" when absent) as the auth layer
// (auth.h) leaves it. With API keys, that layer runs before every route and rewrites the header to
// the tenant of the request's key (a client's header that names another tenant is a 403 there),
// so the functions below give the key's tenant and nothing a client writes can change it. Without
// keys, the header is the client's, as it always was.
//
// The memory REST API works inside the request's tenant; a generation request's memory object
// uses it unless the object names its own tenant: naming a different one than the header is a 400
// (a gateway that sets the header keeps clients inside their tenant), or a 403 when the header
// comes from a key. Names follow the FactStore's rules: 1 to FactStore::kMaxNameBytes bytes, no
// control characters.
#pragma once
#include <httplib.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "server/memory_spec.h"

namespace inferscale::server {

inline constexpr const char* kTenantHeader = "X-InferScale-Tenant";
// Set by the auth layer alone (it drops any a client sends): the tenant header comes from a key.
inline constexpr const char* kTenantFromKeyHeader = "X-InferScale-Tenant-From-Key";

// 400 naming `param` (code invalid_name) unless `name` is a valid tenant or user name: the
// store's rule (name_problem in memory/store/fact_store.h), for REST paths and memory objects alike.
void check_name(std::string_view name, const std::string& param);

// The header's tenant, or kDefaultTenant; 400 when the header holds an invalid name.
std::string request_tenant(const httplib::Request& req);

// Fills spec.tenant from the header (when the request has one): 400 on a conflict, 403 when the
// header's tenant is the key's.
void apply_tenant_header(const httplib::Request& req, MemorySpec& spec);

// The tenant a generation request runs in: its memory object's (after apply_tenant_header), else
// the header's as sent (not validated: a request without memory never needed a valid one), else
// kDefaultTenant.
std::string generation_tenant(const httplib::Request& req, const MemorySpec* memory);

// The prefix-cache salt of a tenant (Engine::add_request): never 0, so every request the server
// makes is salted and two tenants never share a cached block.
uint64_t tenant_cache_salt(std::string_view tenant);

}  // namespace inferscale::server
