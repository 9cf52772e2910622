#include "memory/formats/locomo.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "memory/formats/json_text.h"
#include "util/check.h"
#include "util/mapped_file.h"

namespace inferscale {

using nlohmann::json;

size_t LocomoConversation::num_turns() const {
  size_t n = 0;
  for (const LocomoSession& s : sessions) n += s.turns.size();
  return n;
}

std::vector<std::string> locomo_evidence_ids(std::string_view s) {
  auto is_digit = [&](size_t i) { return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); };
  auto read_number = [&](size_t& i) {
    const size_t start = i;
    while (is_digit(i)) ++i;
    return std::string(s.substr(start, i - start));
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 'D' || (i > 0 && std::isalnum(static_cast<unsigned char>(s[i - 1])))) continue;
    size_t j = i + 1;
    if (j < s.size() && s[j] == ':' && is_digit(j + 1)) ++j;  // "D:11:26"
    const std::string session = read_number(j);
    if (session.empty() || j >= s.size() || s[j] != ':') continue;
    ++j;
    const std::string turn = read_number(j);
    if (turn.empty()) continue;
    out.push_back("D" + session + ":" + turn);
    i = j - 1;
  }
  return out;
}

namespace {

std::string text_field(const json& obj, const char* key, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number()) return it->dump();
  IS_THROW(kInvalidInput, "{}: \"{}\" is not a string", where, key);
}

LocomoTurn parse_turn(const json& t, std::string_view where) {
  IS_REQUIRE(t.is_object(), kInvalidInput, "{}: a turn is not an object", where);
  LocomoTurn turn;
  turn.speaker = text_field(t, "speaker", where);
  turn.dia_id = text_field(t, "dia_id", where);
  turn.text = text_field(t, "text", where);
  turn.blip_caption = text_field(t, "blip_caption", where);
  IS_REQUIRE(!turn.dia_id.empty(), kInvalidInput, "{}: a turn has no dia_id", where);
  if (auto it = t.find("img_url"); it != t.end()) {
    if (it->is_string()) turn.img_urls.push_back(it->get<std::string>());
    if (it->is_array())
      for (const json& u : *it)
        if (u.is_string()) turn.img_urls.push_back(u.get<std::string>());
  }
  return turn;
}

LocomoQa parse_qa(const json& q, std::string_view where) {
  IS_REQUIRE(q.is_object(), kInvalidInput, "{}: a QA item is not an object", where);
  LocomoQa qa;
  qa.question = text_field(q, "question", where);
  IS_REQUIRE(!qa.question.empty(), kInvalidInput, "{}: a QA item has no question", where);
  const auto ans = q.find("answer");
  qa.has_answer = ans != q.end() && !ans->is_null();
  qa.answer = text_field(q, "answer", where);
  qa.adversarial_answer = text_field(q, "adversarial_answer", where);
  const auto cat = q.find("category");
  IS_REQUIRE(cat != q.end() && cat->is_number_integer(), kInvalidInput, "{}: QA \"{}\" has no integer category", where,
             qa.question);
  qa.category = cat->get<int>();
  if (auto ev = q.find("evidence"); ev != q.end() && ev->is_array()) {
    for (const json& e : *ev) {
      if (!e.is_string()) continue;
      qa.evidence.push_back(e.get<std::string>());
      for (std::string& id : locomo_evidence_ids(qa.evidence.back()))
        if (std::find(qa.evidence_ids.begin(), qa.evidence_ids.end(), id) == qa.evidence_ids.end())
          qa.evidence_ids.push_back(std::move(id));
    }
  }
  return qa;
}

// n of "session_<n>" (digits only after the prefix), else 0.
int session_number(std::string_view key) {
  constexpr std::string_view kPrefix = "session_";
  if (!key.starts_with(kPrefix) || key.size() == kPrefix.size() || key.size() > kPrefix.size() + 6) return 0;
  int n = 0;
  for (char c : key.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return 0;
    n = n * 10 + (c - '0');
  }
  return n;
}

LocomoConversation parse_sample(const json& sample, std::string_view origin, size_t index) {
  std::string where = fmt::format("{}: sample {}", origin, index);
  IS_REQUIRE(sample.is_object(), kInvalidInput, "{} is not an object", where);
  LocomoConversation c;
  c.sample_id = text_field(sample, "sample_id", where);
  IS_REQUIRE(!c.sample_id.empty(), kInvalidInput, "{} has no sample_id", where);
  where = fmt::format("{}: {}", origin, c.sample_id);
  const auto conv = sample.find("conversation");
  IS_REQUIRE(conv != sample.end() && conv->is_object(), kInvalidInput, "{} has no conversation object", where);
  c.speaker_a = text_field(*conv, "speaker_a", where);
  c.speaker_b = text_field(*conv, "speaker_b", where);
  for (const auto& [key, value] : conv->items()) {
    const int n = session_number(key);
    if (n == 0 || !value.is_array()) continue;  // dates, speakers, and dates without a session
    LocomoSession s;
    s.number = n;
    s.date_time = text_field(*conv, fmt::format("session_{}_date_time", n).c_str(), where);
    const std::string swhere = fmt::format("{} {}", where, key);
    for (const json& t : value) s.turns.push_back(parse_turn(t, swhere));
    c.sessions.push_back(std::move(s));
  }
  std::sort(c.sessions.begin(), c.sessions.end(),
            [](const LocomoSession& a, const LocomoSession& b) { return a.number < b.number; });
  if (auto qa = sample.find("qa"); qa != sample.end()) {
    IS_REQUIRE(qa->is_array(), kInvalidInput, "{}: \"qa\" is not a list", where);
    for (const json& q : *qa) c.qa.push_back(parse_qa(q, where));
  }
  return c;
}

}  // namespace

std::vector<LocomoConversation> parse_locomo(std::string_view json_text, std::string_view origin) {
  const json doc = parse_json_text(json_text, origin);
  IS_REQUIRE(doc.is_array(), kInvalidInput, "{}: expected a list of LoCoMo samples", origin);
  std::vector<LocomoConversation> out;
  out.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) out.push_back(parse_sample(doc[i], origin, i));
  return out;
}

std::vector<LocomoConversation> load_locomo(const std::string& path) {
  const auto file = MappedFile::open(path);
  return parse_locomo(std::string_view(reinterpret_cast<const char*>(file->data()), file->size()), path);
}

std::vector<NewFact> locomo_turns(const LocomoConversation& c, size_t* skipped) {
  std::vector<NewFact> turns;
  for (const LocomoSession& s : c.sessions) {
    for (const LocomoTurn& t : s.turns) {
      if (t.text.find_first_not_of(" \t\r\n") == std::string::npos) {
        if (skipped) ++*skipped;
        continue;
      }
      NewFact f;
      f.text = t.text;
      f.timestamp = s.date_time;
      f.source.session = "session_" + std::to_string(s.number);
      f.source.turn = t.dia_id;
      f.source.speaker = t.speaker;
      if (!t.blip_caption.empty() || !t.img_urls.empty()) {
        json m = json::object();
        if (!t.blip_caption.empty()) m["blip_caption"] = t.blip_caption;
        if (!t.img_urls.empty()) m["img_url"] = t.img_urls;
        f.metadata = m.dump();
      }
      turns.push_back(std::move(f));
    }
  }
  return turns;
}

}  // namespace inferscale
