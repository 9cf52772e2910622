#include "server/memory_spec.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/tenant.h"
#include "util/check.h"

namespace inferscale::server {

namespace {

// true / "user": the user's message; "all": the reply too; false / "none": nothing.
MemorySpec::Store parse_store(const JsonFields& f) {
  const nlohmann::json* v = f.get("store");
  if (!v) return MemorySpec::Store::kNone;
  if (v->is_boolean()) return v->get<bool>() ? MemorySpec::Store::kUser : MemorySpec::Store::kNone;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "user") return MemorySpec::Store::kUser;
    if (s == "all") return MemorySpec::Store::kAll;
    if (s == "none") return MemorySpec::Store::kNone;
  }
  f.fail("store", "must be true or \"user\" (the user's message), \"all\" (the reply too), or false / \"none\"");
}

}  // namespace

MemorySpec parse_memory_spec(const nlohmann::json& j) {
  if (!j.is_object()) throw bad_request(fmt::format("'memory' must be an object, got {}", json_type_name(j)), "memory");
  const JsonFields f(j, "memory.");
  f.only({"user", "user_id", "tenant", "query", "query_vector", "k", "top_k", "w", "mode", "order", "recompute",
          "recompute_last", "recompute_attention", "neighbours", "name", "store", "conversation"});
  // Mem0's names for two fields: either name, not both.
  const char* user_key = f.get("user_id") ? "user_id" : "user";
  const char* k_key = f.get("top_k") ? "top_k" : "k";
  if (f.get("user_id") && f.get("user")) f.fail("user_id", "is Mem0's name for 'memory.user': give one of them");
  if (f.get("top_k") && f.get("k")) f.fail("top_k", "is Mem0's name for 'memory.k': give one of them");
  MemorySpec s;
  auto user = f.string(user_key);
  if (!user || user->empty()) f.fail(user_key, "is required (a non-empty string)");
  check_name(*user, f.param(user_key));
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
  if (auto k = f.integer(k_key, 0, MemoryRequest::kMaxK)) s.k = static_cast<int32_t>(*k);
  if (auto w = f.integer("w", 0, MemoryRequest::kMaxWindow)) s.window = static_cast<int32_t>(*w);
  if (auto r = f.integer("recompute", 0, MemoryRequest::kMaxRecompute)) s.recompute = static_cast<int32_t>(*r);
  if (auto r = f.integer("recompute_last", 0, MemoryRequest::kMaxRecomputeLast)) s.recompute_last = static_cast<int32_t>(*r);
  if (auto a = f.number("recompute_attention", 0.0, 1.0)) s.recompute_attention = *a;
  if (auto n = f.number("neighbours", 0.0, 1.0)) s.neighbours = *n;
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
  if (auto n = f.string("name")) {
    check_name(*n, f.param("name"));
    s.name = *n;
  }
  s.store = parse_store(f);
  const bool store = s.store != MemorySpec::Store::kNone;
  if (store && s.mode == MemoryMode::kOff)
    f.fail("store", "cannot be combined with mode 'off' (memory off reads and writes nothing)");
  if (auto c = f.string("conversation")) {
    if (!store) f.fail("conversation", "names where 'memory.store' writes: it needs \"store\": true");
    check_name(*c, f.param("conversation"));
    s.conversation = *c;
  }
  return s;
}

}  // namespace inferscale::server
