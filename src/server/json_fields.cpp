#include "server/json_fields.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "memory/formats/fact_json.h"
#include "server/api_error.h"
#include "util/check.h"

namespace inferscale::server {

const char* json_type_name(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "object";
    case nlohmann::json::value_t::array: return "array";
    case nlohmann::json::value_t::string: return "string";
    case nlohmann::json::value_t::boolean: return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "integer";
    case nlohmann::json::value_t::number_float: return "number";
    default: return "value";
  }
}

void JsonFields::fail(const char* key, const std::string& message) const {
  throw bad_request(fmt::format("'{}': {}", param(key), message), param(key));
}

void JsonFields::only(std::initializer_list<std::string_view> known) const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    const std::string where = prefix_.empty() ? "the request body" : "'" + prefix_.substr(0, prefix_.size() - 1) + "'";
    throw bad_request(fmt::format("{} has an unknown field '{}' (known: {})", where, it.key(), fmt::join(known, ", ")),
                      prefix_ + it.key());
  }
}

const nlohmann::json* JsonFields::get(const char* key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> JsonFields::string(const char* key) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(key, fmt::format("expected a string, got {}", json_type_name(*v)));
  return v->get<std::string>();
}

std::optional<bool> JsonFields::boolean(const char* key) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail(key, fmt::format("expected a boolean, got {}", json_type_name(*v)));
  return v->get<bool>();
}

std::optional<int64_t> JsonFields::integer(const char* key, int64_t lo, int64_t hi) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) fail(key, fmt::format("must be between {} and {}, got {}", lo, hi, u));
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9.0e18) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    fail(key, fmt::format("expected an integer, got {}", v->is_number() ? v->dump() : json_type_name(*v)));
  }
  if (x < lo || x > hi) fail(key, fmt::format("must be between {} and {}, got {}", lo, hi, x));
  return x;
}

std::optional<std::vector<float>> JsonFields::floats(const char* key, size_t max_len) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  std::vector<float> out;
  try {
    out = floats_from_json(*v, "the value");
  } catch (const Error& e) {
    fail(key, e.what());
  }
  if (out.empty() || out.size() > max_len) fail(key, fmt::format("must hold 1 to {} numbers, got {}", max_len, out.size()));
  return out;
}

std::optional<double> JsonFields::number(const char* key, double lo, double hi) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(key, fmt::format("expected a number, got {}", json_type_name(*v)));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) fail(key, fmt::format("must be between {} and {}, got {}", lo, hi, x));
  return x;
}

}  // namespace inferscale::server
