#include "server/mem0_handler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "memory/formats/chat_turn.h"
#include "memory/store/timestamp.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/json_fields.h"
#include "server/mem0_shapes.h"
#include "server/memory_handler.h"
#include "server/memory_spec.h"
#include "server/tenant.h"
#include "server/url_path.h"

namespace inferscale::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr int64_t kDefaultListLimit = 100;  // GET /memories, and a page of POST /v3/memories/
constexpr int64_t kMaxListLimit = 1000;
constexpr int64_t kDefaultTopK = 10;        // Mem0 platform's default
constexpr size_t kMaxMessages = 4096;       // as many as facts in one body of the memory REST API

struct Call {
  const httplib::Request& req;
  httplib::Response& res;
  FactStore& store;
  const Retriever& retriever;
  std::string tenant;
  std::string id_text;  // "" on routes without {id}

  int64_t id() const { return parse_mem0_id(id_text); }
};

void send(httplib::Response& res, const ojson& j) {
  res.status = 200;
  res.set_content(j.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

// The JSON body; an empty one reads as {} (Mem0 clients send none on some deletes and gets).
json body_of(const Call& c) { return c.req.body.empty() ? json::object() : parse_json_body(c.req.body); }

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
  throw bad_request(fmt::format("'{}': {}", param, what), param, "unsupported");
}

// Fields whose meaning this server cannot keep: a 400 rather than a silent no.
void refuse_unkept(const json& body) {
  for (const char* key : {"expiration_date", "memory_type"})
    if (auto it = body.find(key); it != body.end() && !it->is_null())
      unsupported(key, "is not supported by this server (memories do not expire; every memory is conversational)");
  if (auto it = body.find("enable_graph"); it != body.end() && *it == true)
    unsupported("enable_graph", "graph memory is not supported by this server");
}

// Read narrowings this server does not keep (categories are an output of Mem0's LLM extraction;
// the platform's date range): a 400 rather than answering with more than was asked for.
void refuse_unkept_read(const json& body) {
  for (const char* key : {"categories", "start_date", "end_date"})
    if (auto it = body.find(key); it != body.end() && !it->is_null())
      unsupported(key, "is not supported by this server (filter by entity ids and metadata)");
}

// 404 for a memory id the tenant has no fact under: says when it was deleted, if it was.
[[noreturn]] void memory_not_found(const Call& c, int64_t id) {
  const std::vector<FactEvent> h = c.store.history(c.tenant, id);
  if (!h.empty() && h.back().kind == FactEventKind::kDelete)
    throw ApiError(404, "not_found_error", fmt::format("memory '{}' was deleted at {}", id, iso_utc_micros(h.back().at_ms)),
                   "memory_id", "memory_not_found");
  throw ApiError(404, "not_found_error", fmt::format("no memory '{}' in tenant '{}'", id, c.tenant), "memory_id",
                 "memory_not_found");
}

Fact find_memory(const Call& c, int64_t id) {
  std::optional<Fact> f = c.store.find(c.tenant, id);
  if (!f) memory_not_found(c, id);
  return std::move(*f);
}

// Runs a store call on the fact `id`: kNotFound (it went meanwhile) is memory_not_found.
template <class F>
auto on_memory(const Call& c, int64_t id, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) memory_not_found(c, id);
    throw;
  }
}

void check_text_size(const std::string& text, const std::string& param) {
  if (text.size() > FactStore::kMaxTextBytes)
    throw ApiError(413, "invalid_request_error",
                   fmt::format("'{}' is {} bytes; at most {}", param, text.size(), FactStore::kMaxTextBytes), param,
                   "fact_too_large");
}

// The scope's facts, ascending by id (all of the owner's, or those contains() keeps).
std::vector<Fact> scope_facts(const Call& c, const Mem0Scope& scope, size_t limit) {
  std::vector<Fact> facts = c.store.list(c.tenant, scope.owner(), ListOptions{0, scope.narrows() ? SIZE_MAX : limit});
  if (scope.narrows()) std::erase_if(facts, [&](const Fact& f) { return !scope.contains(f); });
  if (facts.size() > limit) facts.resize(limit);
  return facts;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- handlers (HTTP thread) ----

void ping(Call& c) {
  send(c.res, {{"status", "ok"},
               {"message", "pong"},
               {"org_id", "inferscale"},
               {"project_id", c.tenant},
               {"user_email", nullptr}});
}

void add(Call& c) {
  const json body = body_of(c);
  refuse_unkept(body);
  const Mem0Scope scope = mem0_scope(c.req, &body);
  const JsonFields f(body);
  f.boolean("infer");  // type-checked; true and false both store the messages as they are (mem0_turns)
  const json* metadata = f.get("metadata");
  if (metadata && !metadata->is_object()) f.fail("metadata", "must be an object (or null)");
  const int64_t at = f.integer("timestamp", 0, int64_t{253402300799}).value_or(now_s());  // up to 9999-12-31
  const std::vector<Mem0Message> messages = mem0_messages(body);
  if (messages.size() > kMaxMessages)
    throw ApiError(413, "invalid_request_error",
                   fmt::format("'messages' holds {} messages; at most {} per request", messages.size(), kMaxMessages),
                   "messages", "too_many_facts");
  for (size_t i = 0; i < messages.size(); ++i) check_text_size(messages[i].content, fmt::format("messages[{}].content", i));
  const std::vector<NewFact> turns = mem0_turns(messages, scope, metadata ? *metadata : json(), at);
  ojson results = ojson::array();
  if (!turns.empty()) {
    const std::string owner = scope.owner();
    const std::vector<int64_t> ids = c.store.add_turns(c.tenant, owner, kChatConversation, turns);
    refresh_retriever(c.retriever, c.tenant, owner);
    for (const Fact& fact : c.store.get_existing(c.tenant, owner, ids)) {
      ojson m = mem0_memory_json(fact);
      m["event"] = "ADD";
      results.push_back(std::move(m));
    }
  }
  send(c.res, {{"results", std::move(results)}});
}

void search(Call& c) {
  const json body = body_of(c);
  refuse_unkept_read(body);
  const Mem0Scope scope = mem0_scope(c.req, &body);
  const JsonFields f(body);
  const auto query = f.string("query");
  if (!query || query->find_first_not_of(" \t\r\n") == std::string::npos)
    f.fail("query", "is required (a non-empty string)");
  const auto top_k = f.integer("top_k", 1, MemoryRequest::kMaxK);
  const auto limit = f.integer("limit", 1, MemoryRequest::kMaxK);  // the older name
  if (top_k && limit && *top_k != *limit) f.fail("limit", "is the older name of 'top_k': give one of them");
  const auto k = static_cast<size_t>(top_k.value_or(limit.value_or(kDefaultTopK)));
  const auto threshold = f.number("threshold", -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
  const std::string owner = scope.owner();
  c.store.refresh();  // another process's writes reach the retriever's indexes first
  // A narrowed scope ranks all of the owner's facts, then keeps the scope's best k.
  const size_t n = scope.narrows() ? std::max(k, c.store.count(c.tenant, owner)) : k;
  const std::vector<ScoredFact> hits = c.retriever.search(c.tenant, owner, *query, n);
  ojson results = ojson::array();
  for (const FactHit& hit : fetch_hits(c.store, c.tenant, owner, hits)) {
    if (results.size() == k) break;
    if ((scope.narrows() && !scope.contains(hit.fact)) || (threshold && hit.score < *threshold)) continue;
    ojson m = mem0_memory_json(hit.fact);
    m["score"] = hit.score;
    results.push_back(std::move(m));
  }
  send(c.res, {{"results", std::move(results)}});
}

// GET /memories?user_id=...: Mem0's server answers {"results": [...]}.
void list_memories(Call& c) {
  const Mem0Scope scope = mem0_scope(c.req, nullptr);
  const char* name = c.req.has_param("top_k") ? "top_k" : "limit";
  const auto limit = static_cast<size_t>(query_int(c.req, name, 1, kMaxListLimit).value_or(kDefaultListLimit));
  ojson results = ojson::array();
  for (const Fact& fact : scope_facts(c, scope, limit)) results.push_back(mem0_memory_json(fact));
  send(c.res, {{"results", std::move(results)}});
}

// POST /v3/memories/ (and /v2/): the platform's get-all, a page of {"count", "next", "previous", "results"}.
void page_memories(Call& c) {
  const json body = body_of(c);
  refuse_unkept_read(body);
  const Mem0Scope scope = mem0_scope(c.req, &body);
  const JsonFields f(body);
  const auto page = query_int(c.req, "page", 1, std::numeric_limits<int32_t>::max())
                        .value_or(f.integer("page", 1, std::numeric_limits<int32_t>::max()).value_or(1));
  const auto size = query_int(c.req, "page_size", 1, kMaxListLimit).value_or(f.integer("page_size", 1, kMaxListLimit).value_or(kDefaultListLimit));
  const std::vector<Fact> all = scope_facts(c, scope, SIZE_MAX);
  const auto count = static_cast<int64_t>(all.size());
  const int64_t first = std::min<int64_t>((page - 1) * size, count);
  const int64_t last = std::min<int64_t>(first + size, count);
  ojson results = ojson::array();
  for (int64_t i = first; i < last; ++i) results.push_back(mem0_memory_json(all[static_cast<size_t>(i)]));
  auto link = [&](int64_t p) { return ojson(fmt::format("{}?page={}&page_size={}", c.req.path, p, size)); };
  send(c.res, {{"count", count},
               {"next", last < count ? link(page + 1) : ojson(nullptr)},
               {"previous", page > 1 ? link(page - 1) : ojson(nullptr)},
               {"results", std::move(results)}});
}

void get_memory(Call& c) { send(c.res, mem0_memory_json(find_memory(c, c.id()))); }

void update_memory(Call& c) {
  const int64_t id = c.id();
  const json body = body_of(c);
  for (const char* key : {"timestamp", "expiration_date"})
    if (auto it = body.find(key); it != body.end() && !it->is_null())
      unsupported(key, "cannot be changed by an update on this server");
  const JsonFields f(body);
  auto text = f.string("text");
  if (auto data = f.string("data")) {  // Mem0's older name
    if (text && *text != *data) f.fail("data", "is the older name of 'text': give one of them");
    text = data;
  }
  const bool has_metadata = body.contains("metadata");
  if (has_metadata && !body["metadata"].is_null() && !body["metadata"].is_object())
    f.fail("metadata", "must be an object (or null)");
  if (!text && !has_metadata) throw bad_request("nothing to change: give \"text\" and/or \"metadata\"", "text");
  if (text) check_text_size(*text, "text");
  const Fact old = find_memory(c, id);
  FactUpdate u;
  u.text = text;
  if (has_metadata) u.metadata = mem0_updated_metadata(body["metadata"], old.metadata);
  const Fact updated = on_memory(c, id, [&] { return c.store.update(c.tenant, old.user, id, u); });
  if (text) refresh_retriever(c.retriever, c.tenant, old.user);
  ojson m = mem0_memory_json(updated);
  m["event"] = "UPDATE";
  m["message"] = "Memory updated successfully!";
  send(c.res, m);
}

void delete_memory(Call& c) {
  const int64_t id = c.id();
  const Fact f = find_memory(c, id);
  on_memory(c, id, [&] { c.store.remove(c.tenant, f.user, id); });
  send(c.res, {{"message", "Memory deleted successfully!"}, {"id", mem0_id(id)}});
}

void delete_memories(Call& c) {
  const json body = body_of(c);
  const Mem0Scope scope = mem0_scope(c.req, &body);
  size_t n = 0;
  if (!scope.narrows()) {
    n = c.store.remove_user(c.tenant, scope.owner());
  } else {
    std::vector<int64_t> ids;
    for (const Fact& f : scope_facts(c, scope, SIZE_MAX)) ids.push_back(f.id);
    n = c.store.remove_existing(c.tenant, scope.owner(), ids);
  }
  send(c.res, {{"message", "Memories deleted successfully!"}, {"deleted", n}});
}

void history(Call& c) {
  const int64_t id = c.id();
  const std::vector<FactEvent> events = c.store.history(c.tenant, id);
  if (events.empty()) memory_not_found(c, id);
  ojson out = ojson::array();
  for (const FactEvent& e : events) out.push_back(mem0_history_json(e));
  send(c.res, out);
}

// ---- routing ----

// Shapes are the segments after the host; {id} is a memory id.
constexpr Route<Call> kRoutes[] = {
    // Mem0's self-hosted server
    {"POST", "memories", add},
    {"GET", "memories", list_memories},
    {"DELETE", "memories", delete_memories},
    {"GET", "memories/{id}", get_memory},
    {"PUT", "memories/{id}", update_memory},
    {"DELETE", "memories/{id}", delete_memory},
    {"GET", "memories/{id}/history", history},
    {"POST", "search", search},
    // Mem0's platform API (MemoryClient)
    {"GET", "v1/ping", ping},
    {"POST", "v1/memories", add},
    {"DELETE", "v1/memories", delete_memories},
    {"POST", "v1/memories/search", search},
    {"GET", "v1/memories/{id}", get_memory},
    {"PUT", "v1/memories/{id}", update_memory},
    {"DELETE", "v1/memories/{id}", delete_memory},
    {"GET", "v1/memories/{id}/history", history},
    {"POST", "v2/memories", page_memories},
    {"POST", "v2/memories/search", search},
    {"POST", "v3/memories", page_memories},
    {"POST", "v3/memories/add", add},
    {"POST", "v3/memories/search", search},
};

void route(MemoryProvider* memory, const httplib::Request& req, httplib::Response& res) {
  const std::vector<std::string> segs = path_segments(req.target);
  std::vector<std::string> params;
  const Route<Call>& found = find_route(std::span<const Route<Call>>(kRoutes), segs, req, res, params);
  if (!memory) throw bad_request("memory is not enabled on this server", {}, "memory_disabled");
  Call c{req, res, memory->store(), memory->retriever(), request_tenant(req), params.empty() ? std::string() : params[0]};
  found.run(c);
}

}  // namespace

void Mem0Handler::handle(const httplib::Request& req, httplib::Response& res) const {
  try {
    route(memory_, req, res);
  } catch (...) {
    // The server's error body, plus the "detail" string of Mem0's server (FastAPI), which the
    // mem0ai client turns into its exception's message.
    const ApiError e = api_error_from(std::current_exception());
    json body = json::parse(e.body());
    body["detail"] = e.what();
    res.status = e.status;
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }
}

}  // namespace inferscale::server
