// Authentication: the one layer in front of every route. HttpServer installs it as cpp-httplib's
// pre-routing handler, which runs before any route is matched, so every route (also those added
// later, and unknown ones) is behind it and no handler can forget it.
//
// With API keys (api_keys.h; `serve --api-keys FILE`), every request but GET/HEAD /health must
// carry a key, in any of the forms clients send:
//
//   Authorization: Bearer KEY   OpenAI clients          Authorization: Token KEY   Mem0's MemoryClient
//   X-API-Key: KEY              Mem0's self-hosted server
//
// (the scheme is case-insensitive; when Authorization and X-API-Key are both given they must hold
// the same key). The tenant is the key's alone:
//
//   no key, or an Authorization of another scheme           401 missing_api_key / invalid_api_key
//   a key that is not in the file                           401 invalid_api_key
//   X-InferScale-Tenant naming another tenant than the key's 403 tenant_mismatch
//   accepted: X-InferScale-Tenant := the key's tenant, X-InferScale-Tenant-From-Key set
//
// and tenant.h reads the tenant from that header, so every handler works inside the key's tenant
// (a memory.tenant that disagrees is a 403 there). A 401 carries WWW-Authenticate. No error
// quotes the key.
//
// Without keys the server works as before: the tenant header is the client's; the layer only
// drops a client's X-InferScale-Tenant-From-Key, which only it may set.
#pragma once
#include <httplib.h>

#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/api_keys.h"

namespace inferscale::server {

inline constexpr const char* kAuthChallenge = "Bearer realm=\"inferscale\"";

// Checks the request's credentials against `keys` (null: no keys configured) and rewrites its
// tenant headers as above. Returns the error to answer, or nullopt when the request may go on.
std::optional<ApiError> authenticate(httplib::Request& req, const ApiKeys* keys);

// Whether `host` (a --host value) is a loopback address: "localhost", 127.0.0.0/8, ::1 (or
// ::ffff:127.x). Anything else, names included, may be reachable from other machines.
bool is_loopback_host(const std::string& host);

}  // namespace inferscale::server
