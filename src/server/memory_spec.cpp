#include "server/memory_spec.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/tenant.h"
#include "util/check.h"

namespace inferscale::server {

MemorySpec parse_memory_spec(const nlohmann::json& j) {
  if (!j.is_object()) throw bad_request(fmt::format("'memory' must be an object, got {}", json_type_name(j)), "memory");
  const JsonFields f(j, "memory.");
  f.only({"user", "tenant", "query", "query_vector", "k", "w", "mode", "order", "recompute", "recompute_last"});
  MemorySpec s;
  auto user = f.string("user");
  if (!user || user->empty()) f.fail("user", "is required (a non-empty string)");
  check_name(*user, "memory.user");
  s.user = *user;
  if (auto t = f.string("tenant")) {
    check_name(*t, "memory.tenant");
    s.tenant = *t;
  }
  if (auto q = f.string("query")) s.query = *q;
  if (auto v = f.floats("query_vector", MemorySpec::kMaxVectorDim)) {
    if (f.get("query")) f.fail("query_vector", "give 'memory.query' or 'memory.query_vector', not both");
    s.query_vector = std::move(*v);
  }
  if (auto k = f.integer("k", 0, MemoryRequest::kMaxK)) s.k = static_cast<int32_t>(*k);
  if (auto w = f.integer("w", 0, MemoryRequest::kMaxWindow)) s.window = static_cast<int32_t>(*w);
  if (auto r = f.integer("recompute", 0, MemoryRequest::kMaxRecompute)) s.recompute = static_cast<int32_t>(*r);
  if (auto r = f.integer("recompute_last", 0, MemoryRequest::kMaxRecomputeLast)) s.recompute_last = static_cast<int32_t>(*r);
  // The memory module owns the names; its kInvalidInput message becomes a 400 naming the field.
  auto named = [&f](const char* key, auto parse) {
    try {
      return parse(*f.string(key));
    } catch (const Error& e) {
      f.fail(key, e.what());
    }
  };
  if (f.string("mode")) s.mode = named("mode", parse_memory_mode);
  if (f.string("order")) s.order = named("order", parse_memory_order);
  return s;
}

}  // namespace inferscale::server
