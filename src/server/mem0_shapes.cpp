#include "server/mem0_shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include "memory/formats/chat_turn.h"
#include "memory/store/timestamp.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/tenant.h"

namespace inferscale::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kAgentOwner = "agent:";
constexpr const char* kRunOwner = "run:";
// Mem0's keys that the responses lift out of `metadata` into top-level fields.
constexpr std::array<const char*, 5> kLiftedKeys = {"user_id", "agent_id", "run_id", "role", "actor_id"};

bool is_entity(std::string_view k) { return k == "user_id" || k == "agent_id" || k == "run_id"; }

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
  throw bad_request(fmt::format("'{}': {}", param, what), param, "unsupported");
}

// Collects entity ids and metadata filters; the same id from two places must agree.
class ScopeBuilder {
 public:
  void entity(std::string_view key, const json& v, const std::string& param) {
    if (v.is_null()) return;  // clients send null for "not given"
    if (v.is_object()) unsupported(param, "filter operators are not supported: give the id itself");
    if (!v.is_string()) throw bad_request(fmt::format("'{}' must be a string, got {}", param, json_type_name(v)), param);
    const std::string s = v.get<std::string>();
    if (s == "*") unsupported(param, "a wildcard entity id is not supported: name the user (or agent, or run)");
    check_name(s, param);
    std::optional<std::string>& slot = key == "user_id" ? scope_.user_id : key == "agent_id" ? scope_.agent_id : scope_.run_id;
    if (slot && *slot != s)
      throw bad_request(fmt::format("'{}' is '{}' but the call also names '{}'", param, s, *slot), param);
    slot = s;
  }

  void filters(const json& f, const std::string& where) {
    if (!f.is_object()) throw bad_request(fmt::format("'{}' must be an object, got {}", where, json_type_name(f)), where);
    for (auto it = f.begin(); it != f.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      const std::string param = where + "." + k;
      if (k == "AND") {
        if (!v.is_array()) throw bad_request(fmt::format("'{}' must be an array of filters", param), param);
        for (size_t i = 0; i < v.size(); ++i) filters(v[i], fmt::format("{}[{}]", param, i));
      } else if (k == "OR" || k == "NOT") {
        unsupported(param, "only AND of equality filters is supported");
      } else if (k == "app_id") {
        unsupported(param, "app_id is not supported: name the user_id (or agent_id, or run_id)");
      } else if (is_entity(k)) {
        entity(k, v, param);
      } else if (v.is_object() || v.is_array()) {
        unsupported(param, "filter operators are not supported: give a value to match (or \"*\")");
      } else if (!v.is_null()) {
        scope_.metadata.emplace_back(k, v);
      }
    }
  }

  Mem0Scope done() {
    if (!scope_.user_id && !scope_.agent_id && !scope_.run_id)
      throw bad_request("give at least one of user_id, agent_id or run_id (as a field, in \"filters\" or as a query "
                        "parameter): every memory belongs to one",
                        "user_id", "missing_entity");
    const std::string owner = scope_.owner();
    check_name(owner, scope_.user_id ? "user_id" : scope_.agent_id ? "agent_id" : "run_id");
    return std::move(scope_);
  }

 private:
  Mem0Scope scope_;
};

json parse_object(std::string_view text) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json::object();
}

// A stored string under `key` of metadata `m`, or null.
json lifted(const json& m, const char* key) {
  const auto it = m.find(key);
  return it != m.end() && it->is_string() ? *it : json(nullptr);
}

// Mem0's user_id of a fact: its owner, unless the owner is an agent's or a run's own.
json user_id_of(std::string_view owner, const json& m) {
  const json agent = lifted(m, "agent_id"), run = lifted(m, "run_id");
  if (agent.is_string() && owner == kAgentOwner + agent.get<std::string>()) return nullptr;
  if (run.is_string() && owner == kRunOwner + run.get<std::string>()) return nullptr;
  return std::string(owner);
}

// The entity fields and the metadata left after lifting, appended to `out`.
void put_entities(ojson& out, std::string_view owner, std::string_view metadata_text) {
  const json m = parse_object(metadata_text);
  out["user_id"] = user_id_of(owner, m);
  out["agent_id"] = lifted(m, "agent_id");
  out["run_id"] = lifted(m, "run_id");
  for (const char* key : {"role", "actor_id"})
    if (json v = lifted(m, key); v.is_string()) out[key] = std::move(v);
  json rest = m;
  for (const char* key : kLiftedKeys)
    if (rest.contains(key) && rest[key].is_string()) rest.erase(key);
  out["metadata"] = rest.empty() ? ojson(nullptr) : ojson::parse(rest.dump());
}

}  // namespace

std::string Mem0Scope::owner() const {
  if (user_id) return *user_id;
  if (agent_id) return kAgentOwner + *agent_id;
  return kRunOwner + run_id.value_or("");
}

bool Mem0Scope::narrows() const {
  return !metadata.empty() || (user_id && (agent_id || run_id)) || (!user_id && agent_id && run_id);
}

bool Mem0Scope::contains(const Fact& f) const {
  const json m = parse_object(f.metadata);
  auto equals = [&m](const std::string& key, const json& want) {
    const auto it = m.find(key);
    return it != m.end() && (want == "*" || *it == want);
  };
  if (user_id && agent_id && !equals("agent_id", *agent_id)) return false;  // the agent is the owner otherwise
  if ((user_id || agent_id) && run_id && !equals("run_id", *run_id)) return false;
  return std::all_of(metadata.begin(), metadata.end(), [&](const auto& kv) { return equals(kv.first, kv.second); });
}

Mem0Scope mem0_scope(const httplib::Request& req, const json* body) {
  ScopeBuilder b;
  for (const char* key : {"user_id", "agent_id", "run_id"})
    if (req.has_param(key)) b.entity(key, json(req.get_param_value(key)), key);
  if (req.has_param("app_id")) unsupported("app_id", "app_id is not supported: name the user_id (or agent_id, or run_id)");
  if (body) {
    for (const char* key : {"user_id", "agent_id", "run_id"})
      if (auto it = body->find(key); it != body->end()) b.entity(key, *it, key);
    if (auto it = body->find("app_id"); it != body->end() && !it->is_null())
      unsupported("app_id", "app_id is not supported: name the user_id (or agent_id, or run_id)");
    if (auto it = body->find("filters"); it != body->end() && !it->is_null()) b.filters(*it, "filters");
  }
  return b.done();
}

std::vector<Mem0Message> mem0_messages(const json& body) {
  const auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw bad_request("'messages' is required (the messages to store)", "messages");
  if (it->is_string()) return {Mem0Message{"user", "", it->get<std::string>()}};
  const json one = it->is_object() ? json::array({*it}) : *it;
  if (!one.is_array() || one.empty())
    throw bad_request("'messages' must be a non-empty array of {\"role\", \"content\"} messages, or a string", "messages");
  std::vector<Mem0Message> out;
  for (size_t i = 0; i < one.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    if (!one[i].is_object()) throw bad_request(fmt::format("'{}' must be an object", where), where);
    const JsonFields f(one[i], where + ".");
    auto role = f.string("role");
    if (!role || role->empty()) f.fail("role", "is required (user, assistant, system, ...)");
    const json* content = f.get("content");
    if (!content) f.fail("content", "is required");
    if (!content->is_string()) unsupported(f.param("content"), "only text content is supported (a string)");
    out.push_back(Mem0Message{*role, f.string("name").value_or(""), content->get<std::string>()});
  }
  return out;
}

std::string mem0_metadata(const json& client_metadata, const Mem0Scope& scope, std::string_view role,
                          std::string_view actor) {
  json m = client_metadata.is_object() ? client_metadata : json::object();
  for (const char* key : kLiftedKeys) m.erase(key);
  if (scope.agent_id) m["agent_id"] = *scope.agent_id;
  if (scope.run_id) m["run_id"] = *scope.run_id;
  if (!role.empty()) m["role"] = std::string(role);
  if (!actor.empty()) m["actor_id"] = std::string(actor);
  return m.empty() ? std::string() : m.dump();
}

std::string mem0_updated_metadata(const json& client_metadata, std::string_view stored) {
  json m = client_metadata.is_object() ? client_metadata : json::object();
  const json old = parse_object(stored);
  for (const char* key : kLiftedKeys) {
    m.erase(key);
    if (auto it = old.find(key); it != old.end()) m[key] = *it;
  }
  return m.empty() ? std::string() : m.dump();
}

std::vector<NewFact> mem0_turns(const std::vector<Mem0Message>& messages, const Mem0Scope& scope,
                                const json& client_metadata, int64_t at_s) {
  std::vector<NewFact> out;
  for (const Mem0Message& m : messages) {
    const bool blank =
        std::all_of(m.content.begin(), m.content.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
    if (m.role == "system" || blank) continue;
    out.push_back(chat_turn(m.name.empty() ? m.role : m.name, m.content, at_s, mem0_metadata(client_metadata, scope, m.role, m.name)));
  }
  return out;
}

ojson mem0_memory_json(const Fact& f) {
  ojson j = {{"id", mem0_id(f.id)}, {"memory", f.text}};
  put_entities(j, f.user, f.metadata);
  j["created_at"] = iso_utc_micros(f.created_at_ms);
  j["updated_at"] = iso_utc_micros(f.updated_at_ms);
  return j;
}

ojson mem0_history_json(const FactEvent& e) {
  auto text = [](const std::optional<std::string>& s) { return s ? ojson(*s) : ojson(nullptr); };
  ojson j = {{"id", std::to_string(e.seq)},
             {"memory_id", mem0_id(e.fact_id)},
             {"old_memory", text(e.old_text)},
             {"new_memory", text(e.new_text)},
             {"event", fact_event_name(e.kind)},
             {"created_at", iso_utc_micros(e.at_ms)},
             {"updated_at", iso_utc_micros(e.at_ms)},
             {"is_deleted", e.kind == FactEventKind::kDelete}};
  put_entities(j, e.user, e.new_metadata ? *e.new_metadata : e.old_metadata.value_or(""));
  return j;
}

std::string mem0_id(int64_t fact_id) { return std::to_string(fact_id); }

int64_t parse_mem0_id(std::string_view text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0)
    throw bad_request(fmt::format("'{}' is not a memory id of this server (a positive integer, as a string)", text),
                      "memory_id", "invalid_id");
  return v;
}

}  // namespace inferscale::server
