// Typed readers for the fields of a request's JSON object. A field that is absent or null reads as
// nullopt (OpenAI clients send null for "unset"); a field of the wrong type or out of range throws
// ApiError 400 whose `param` names it (with its parent, e.g. "memory.k").
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace inferscale::server {

class JsonFields {
 public:
  // `obj` must outlive this reader; `prefix` is prepended to field names in errors ("memory.").
  JsonFields(const nlohmann::json& obj, std::string prefix = {}) : obj_(obj), prefix_(std::move(prefix)) {}

  // The raw value, or nullptr when absent or null.
  const nlohmann::json* get(const char* key) const;
  std::optional<std::string> string(const char* key) const;
  std::optional<bool> boolean(const char* key) const;
  // An integer in [lo, hi]; 3.0 is accepted as 3, 3.5 is not.
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const;
  // A number in [lo, hi].
  std::optional<double> number(const char* key, double lo, double hi) const;
  // A non-empty array of at most `max_len` finite numbers that fit a float (a query vector).
  std::optional<std::vector<float>> floats(const char* key, size_t max_len) const;

  // 400 naming the first field not in `known`: where a typo would silently change the meaning.
  void only(std::initializer_list<std::string_view> known) const;

  std::string param(const char* key) const { return prefix_ + key; }
  // A 400 naming `key`.
  [[noreturn]] void fail(const char* key, const std::string& message) const;

 private:
  const nlohmann::json& obj_;
  std::string prefix_;
};

// The JSON type's name for messages ("string", "array", ...).
const char* json_type_name(const nlohmann::json& v);

}  // namespace inferscale::server
