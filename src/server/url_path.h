// The path of a request target as percent-decoded segments. Segments are split BEFORE decoding,
// so a user named "a/b" (sent as "a%2Fb") stays one segment: httplib's own `req.path` is decoded
// first and cannot tell the two apart.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace inferscale::server {

// "/v1/memory/users/a%2Fb/facts?limit=3" -> {"v1", "memory", "users", "a/b", "facts"}. The query is
// dropped; one trailing '/' is ignored. Throws ApiError 400 on an invalid percent-escape.
std::vector<std::string> path_segments(std::string_view target);

}  // namespace inferscale::server
