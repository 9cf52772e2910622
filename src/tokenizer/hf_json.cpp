#include "tokenizer/hf_json.h"

#include "util/check.h"

namespace inferscale {

using nlohmann::json;

namespace {

// Whether v is a JSON integer in [0, max]; nothing converted before the range is known (a float,
// or an integer past the target type, would convert with undefined or wrong results).
bool integer_at_most(const json& v, uint64_t max) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= max;
  return v.get<int64_t>() >= 0 && static_cast<uint64_t>(v.get<int64_t>()) <= max;
}

}  // namespace

int32_t hf_token_id(const json& v, const std::string& source, const std::string& what) {
  IS_REQUIRE(integer_at_most(v, kMaxTokenId - 1), kInvalidInput, "{}: {}: token id {} is not an integer in [0, {})", source,
             what, v.dump(), kMaxTokenId);
  return static_cast<int32_t>(v.get<int64_t>());
}

size_t hf_size(const json& v, const std::string& source, const std::string& what, size_t max) {
  IS_REQUIRE(integer_at_most(v, max), kInvalidInput, "{}: {} is {}, not an integer in [0, {}]", source, what, v.dump(), max);
  return static_cast<size_t>(v.get<uint64_t>());
}

std::string hf_type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

bool hf_flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

AddedToken hf_added_token(const json& t, int32_t id) {
  AddedToken a;
  a.id = id;
  a.content = t.at("content").get<std::string>();
  a.special = hf_flag(t, "special");
  a.lstrip = hf_flag(t, "lstrip");
  a.rstrip = hf_flag(t, "rstrip");
  a.single_word = hf_flag(t, "single_word");
  return a;
}

void hf_template_single(const json& p, const std::string& source, std::vector<int32_t>& prefix,
                        std::vector<int32_t>& suffix) {
  bool seen_a = false;
  for (const json& item : p.at("single")) {
    if (item.contains("Sequence")) {
      IS_REQUIRE(item["Sequence"].at("id") == "A", kUnsupported,
                 "{}: unsupported TemplateProcessing single with a second sequence", source);
      seen_a = true;
    } else {
      const auto name = item.at("SpecialToken").at("id").get<std::string>();
      const json& ids = p.at("special_tokens").at(name).at("ids");
      auto& dst = seen_a ? suffix : prefix;
      for (const json& id : ids) dst.push_back(hf_token_id(id, source, "special_tokens." + name + ".ids"));
    }
  }
}

}  // namespace inferscale
