#include "server/memory_spec.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace inferscale::server {

const char* memory_mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::kInject: return "inject";
    case MemoryMode::kText: return "text";
    case MemoryMode::kOff: return "off";
  }
  return "";
}

const char* memory_order_name(MemoryOrder o) {
  switch (o) {
    case MemoryOrder::kBestLast: return "best_last";
    case MemoryOrder::kBestFirst: return "best_first";
    case MemoryOrder::kChronological: return "chronological";
  }
  return "";
}

MemorySpec parse_memory_spec(const nlohmann::json& j) {
  if (!j.is_object()) throw bad_request(fmt::format("'memory' must be an object, got {}", json_type_name(j)), "memory");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "user" && k != "k" && k != "w" && k != "mode" && k != "order")
      throw bad_request(fmt::format("'memory' has an unknown field '{}' (known: user, k, w, mode, order)", k), "memory." + k);
  }
  const JsonFields f(j, "memory.");
  MemorySpec s;
  auto user = f.string("user");
  if (!user || user->empty()) f.fail("user", "is required (a non-empty string)");
  if (user->size() > MemorySpec::kMaxUserBytes) f.fail("user", fmt::format("must be at most {} bytes", MemorySpec::kMaxUserBytes));
  s.user = *user;
  if (auto k = f.integer("k", 0, MemorySpec::kMaxK)) s.k = static_cast<int32_t>(*k);
  if (auto w = f.integer("w", 0, MemorySpec::kMaxW)) s.w = static_cast<int32_t>(*w);
  if (auto mode = f.string("mode")) {
    if (*mode == "inject") s.mode = MemoryMode::kInject;
    else if (*mode == "text") s.mode = MemoryMode::kText;
    else if (*mode == "off") s.mode = MemoryMode::kOff;
    else f.fail("mode", fmt::format("must be one of inject, text, off; got '{}'", *mode));
  }
  if (auto order = f.string("order")) {
    if (*order == "best_last") s.order = MemoryOrder::kBestLast;
    else if (*order == "best_first") s.order = MemoryOrder::kBestFirst;
    else if (*order == "chronological") s.order = MemoryOrder::kChronological;
    else f.fail("order", fmt::format("must be one of best_last, best_first, chronological; got '{}'", *order));
  }
  return s;
}

}  // namespace inferscale::server
