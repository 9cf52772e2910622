// Tenants and user names on the HTTP side.
//
// A request's tenant comes from the header X-InferScale-Tenant ("default" when absent): the memory
// REST API works inside it, and a generation request's memory object uses it unless the object
// names its own tenant (naming a different one than the header is a 400, so a gateway that sets
// the header keeps clients inside their tenant). Names follow the FactStore's rules: 1 to
// FactStore::kMaxNameBytes bytes, no control characters.
#pragma once
#include <httplib.h>

#include <string>
#include <string_view>

#include "server/memory_spec.h"

namespace inferscale::server {

inline constexpr const char* kTenantHeader = "X-InferScale-Tenant";

// 400 naming `param` (code invalid_name) unless `name` is a valid tenant or user name: the
// store's rule (name_problem in memory/fact_store.h), for REST paths and memory objects alike.
void check_name(std::string_view name, const std::string& param);

// The header's tenant, or kDefaultTenant; 400 when the header holds an invalid name.
std::string request_tenant(const httplib::Request& req);

// Fills spec.tenant from the header (when the request has one): 400 on a conflict.
void apply_tenant_header(const httplib::Request& req, MemorySpec& spec);

}  // namespace inferscale::server
