#include "tokenizer/hf_json.h"

#include "util/check.h"

namespace inferscale {

using nlohmann::json;

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
      for (const json& id : ids) dst.push_back(id.get<int32_t>());
    }
  }
}

}  // namespace inferscale
