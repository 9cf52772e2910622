#include "memory/formats/fact_json.h"

#include <cmath>

#include "memory/store/fact_store.h"
#include "memory/formats/json_text.h"
#include "util/check.h"

namespace inferscale {

using nlohmann::json;

namespace {

std::string string_at(const json& v, std::string_view key, std::string_view where) {
  IS_REQUIRE(v.is_string(), kInvalidInput, "{}: \"{}\" must be a string", where, key);
  return v.get<std::string>();
}

FactSource source_from_json(const json& v, std::string_view where) {
  FactSource s;
  if (v.is_string()) {
    s.conversation = v.get<std::string>();
    return s;
  }
  IS_REQUIRE(v.is_object(), kInvalidInput, "{}: \"source\" must be a string or an object", where);
  for (const auto& [key, value] : v.items()) {
    if (key == "conversation") {
      s.conversation = string_at(value, "source.conversation", where);
    } else if (key == "session") {
      s.session = string_at(value, "source.session", where);
    } else if (key == "turn") {
      s.turn = string_at(value, "source.turn", where);
    } else if (key == "speaker") {
      s.speaker = string_at(value, "source.speaker", where);
    } else {
      IS_THROW(kInvalidInput, "{}: unknown key \"source.{}\"", where, key);
    }
  }
  return s;
}

}  // namespace

std::vector<float> floats_from_json(const json& value, std::string_view what) {
  IS_REQUIRE(value.is_array(), kInvalidInput, "{} must be a list of numbers", what);
  std::vector<float> out;
  out.reserve(value.size());
  for (const json& x : value) {
    const double d = x.is_number() ? x.get<double>() : 0.0;
    IS_REQUIRE(x.is_number() && std::isfinite(d) && std::fabs(d) <= 3.0e38, kInvalidInput,
               "{} element {} is not a finite number: {}", what, out.size(), x.dump());
    out.push_back(static_cast<float>(d));
  }
  return out;
}

NewFact fact_record_from_json(const json& r, std::string_view where) {
  IS_REQUIRE(r.is_object(), kInvalidInput, "{}: a fact must be a JSON object", where);
  NewFact f;
  std::string speaker;
  bool has_text = false;
  for (const auto& [key, value] : r.items()) {
    if (key == "text") {
      f.text = string_at(value, key, where);
      has_text = true;
    } else if (key == "speaker") {
      speaker = string_at(value, key, where);
    } else if (key == "date") {
      f.timestamp = string_at(value, key, where);
      check_fact_date(f.timestamp, fmt::format("{}: ", where));
    } else if (key == "source") {
      f.source = source_from_json(value, where);
    } else if (key == "metadata") {
      if (!value.is_null()) f.metadata = value.dump();
      check_fact_metadata(f.metadata, fmt::format("{}: ", where));
    } else if (key == "vector") {
      f.vector = floats_from_json(value, fmt::format("{}: \"vector\"", where));
    } else {
      IS_THROW(kInvalidInput, "{}: unknown key \"{}\" (expected text, speaker, date, source, metadata, vector)", where,
               key);
    }
  }
  IS_REQUIRE(has_text, kInvalidInput, "{}: missing \"text\"", where);
  if (!speaker.empty()) f.source.speaker = speaker;
  return f;
}

std::vector<NewFact> parse_fact_records(std::string_view text, std::string_view origin) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  std::vector<NewFact> out;
  if (first == std::string_view::npos) return out;
  if (text[first] == '[') {
    const json doc = parse_json_text(text, origin);
    IS_REQUIRE(doc.is_array(), kInvalidInput, "{}: expected a JSON array of facts", origin);
    for (size_t i = 0; i < doc.size(); ++i)
      out.push_back(fact_record_from_json(doc[i], fmt::format("{} entry {}", origin, i + 1)));
    return out;
  }
  size_t line_no = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{} line {}", origin, line_no);
    out.push_back(fact_record_from_json(parse_json_text(line, where), where));
  }
  return out;
}

nlohmann::ordered_json source_to_json(const FactSource& s) {
  using oj = nlohmann::ordered_json;
  auto or_null = [](const std::string& v) { return v.empty() ? oj(nullptr) : oj(v); };
  return oj{{"conversation", or_null(s.conversation)},
            {"session", or_null(s.session)},
            {"turn", or_null(s.turn)},
            {"speaker", or_null(s.speaker)}};
}

nlohmann::ordered_json fact_to_json(const Fact& f) {
  using oj = nlohmann::ordered_json;
  auto or_null = [](const std::string& s) { return s.empty() ? oj(nullptr) : oj(s); };
  oj j = {{"id", f.id},
          {"text", f.text},
          {"speaker", or_null(f.source.speaker)},
          {"date", or_null(f.timestamp)},
          {"date_epoch", f.timestamp_epoch ? oj(*f.timestamp_epoch) : oj(nullptr)},
          {"source", source_to_json(f.source)},
          {"turn_index", f.turn_index ? oj(*f.turn_index) : oj(nullptr)},
          {"metadata", f.metadata.empty() ? oj(nullptr) : oj::parse(f.metadata, nullptr, /*allow_exceptions=*/false)},
          {"version", f.version},
          {"created_at", f.created_at_ms / 1000},
          {"updated_at", f.updated_at_ms / 1000}};
  return j;
}

}  // namespace inferscale
