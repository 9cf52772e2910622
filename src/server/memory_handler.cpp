#include "server/memory_handler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "memory/formats/fact_json.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/json_fields.h"
#include "server/tenant.h"
#include "server/url_path.h"
#include "util/check.h"

namespace inferscale::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr size_t kMaxFactsPerRequest = 4096;
constexpr int64_t kDefaultListLimit = 100;
constexpr int64_t kMaxListLimit = 1000;
constexpr int64_t kDefaultSearchK = 10;

// One call: where it runs (store, tenant) and the path's parameters.
struct Call {
  const httplib::Request& req;
  httplib::Response& res;
  FactStore& store;
  const Retriever& retriever;
  std::string tenant;
  std::string user;     // "" on routes without {user}
  std::string id_text;  // "" on routes without {id}

  int64_t id() const {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), v);
    if (ec != std::errc() || end != id_text.data() + id_text.size() || v <= 0)
      throw bad_request(fmt::format("'{}' is not a fact id (a positive integer)", id_text), "id", "invalid_id");
    return v;
  }
};

std::string text_of(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

void send(httplib::Response& res, const ojson& j) {
  res.status = 200;
  res.set_content(text_of(j), "application/json");
}

constexpr const char* kIdempotencyHeader = "Idempotency-Key";
constexpr size_t kMaxIdempotencyKeyBytes = 255;

// The request's Idempotency-Key, when it has one (1 to 255 printable ASCII characters), with a
// hash of what the request asks: method, path (user and fact id) and body.
std::optional<Idempotency> idempotency_of(const httplib::Request& req) {
  if (!req.has_header(kIdempotencyHeader)) return std::nullopt;
  Idempotency idem;
  idem.key = req.get_header_value(kIdempotencyHeader);
  const bool printable = std::all_of(idem.key.begin(), idem.key.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
  if (idem.key.empty() || idem.key.size() > kMaxIdempotencyKeyBytes || !printable)
    throw bad_request(fmt::format("'{}' must be 1 to {} printable ASCII characters", kIdempotencyHeader,
                                  kMaxIdempotencyKeyBytes),
                      kIdempotencyHeader, "invalid_idempotency_key");
  const std::string what = req.method + "\n" + req.path + "\n" + req.body;
  const XXH128_hash_t h = XXH3_128bits(what.data(), what.size());
  idem.request_hash = fmt::format("{:016x}{:016x}", h.high64, h.low64);
  return idem;
}

// Runs a store write, with the request's Idempotency-Key when it has one, and sends its answer,
// made by `answer` from what the write did; a retry under the same key gets the first answer
// (header Idempotent-Replayed: true) and writes nothing. `refresh_after`: the retriever's work for
// new text (see refresh()) follows a write that ran.
template <class Write, class Answer>
void write_and_send(Call& c, Write write, Answer answer, bool refresh_after);


[[noreturn]] void too_large(const std::string& message, const std::string& param, const char* code) {
  throw ApiError(413, "invalid_request_error", message, param, code);
}

// 404 unless the user has a fact: users exist through their facts.
void require_user(const Call& c) {
  if (c.store.count(c.tenant, c.user) == 0)
    throw ApiError(404, "not_found_error", fmt::format("user '{}' has no facts (tenant '{}')", c.user, c.tenant), "user",
                   "user_not_found");
}

// Runs `f`, turning the store's kNotFound for the path's fact into a 404 naming it.
template <class F>
auto on_fact(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) throw ApiError(404, "not_found_error", e.what(), "id", "fact_not_found");
    throw;
  }
}

// The records of a "facts" or "turns" array, in the JSON shape of memory/formats/fact_json.h.
std::vector<NewFact> parse_records(const json& arr, const char* key) {
  if (!arr.is_array() || arr.empty()) throw bad_request(fmt::format("'{}' must be a non-empty array of facts", key), key);
  if (arr.size() > kMaxFactsPerRequest)
    too_large(fmt::format("'{}' holds {} facts; at most {} per request", key, arr.size(), kMaxFactsPerRequest), key,
              "too_many_facts");
  std::vector<NewFact> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", key, i);
    try {
      out.push_back(fact_record_from_json(arr[i], where));
    } catch (const Error& e) {
      throw bad_request(e.what(), where);
    }
    if (out.back().text.size() > FactStore::kMaxTextBytes)
      too_large(fmt::format("'{}.text' is {} bytes; at most {}", where, out.back().text.size(), FactStore::kMaxTextBytes),
                where + ".text", "fact_too_large");
  }
  return out;
}

// ---- handlers (HTTP thread) ----

void list_users(Call& c) {
  ojson data = ojson::array();
  for (const UserRef& u : c.store.users())
    if (u.tenant == c.tenant) data.push_back({{"user", u.user}, {"facts", c.store.count(c.tenant, u.user)}});
  send(c.res, {{"object", "list"}, {"data", std::move(data)}});
}

void get_user(Call& c) {
  require_user(c);
  send(c.res, {{"user", c.user}, {"facts", c.store.count(c.tenant, c.user)}});
}

void delete_user(Call& c) {
  write_and_send(
      c,
      [&](Idempotency* idem) {
        const size_t n = c.store.remove_user(c.tenant, c.user, idem);
        if (n == 0 && !(idem && idem->replayed)) require_user(c);  // throws: nothing to delete
        return WriteResult{{}, {}, n};
      },
      [&](const WriteResult& r) { return ojson{{"user", c.user}, {"deleted", true}, {"facts_deleted", r.deleted}}; }, false);
}

// After a write (memory_handler.h).
void refresh(const Call& c) { refresh_retriever(c.retriever, c.tenant, c.user); }

template <class Write, class Answer>
void write_and_send(Call& c, Write write, Answer answer, bool refresh_after) {
  std::optional<Idempotency> idem = idempotency_of(c.req);
  const auto render = [&answer](const WriteResult& r) { return text_of(answer(r)); };
  if (idem) idem->render = render;
  WriteResult done;
  try {
    done = write(idem ? &*idem : nullptr);
  } catch (const IdempotencyKeyReused& e) {
    throw ApiError(422, "invalid_request_error", e.what(), kIdempotencyHeader, "idempotency_key_reused");
  }
  if (idem && idem->replayed) c.res.set_header("Idempotent-Replayed", "true");
  else if (refresh_after) refresh(c);
  c.res.status = 200;
  c.res.set_content(idem ? idem->answer : render(done), "application/json");
}

void add_facts(Call& c) {
  const json body = parse_json_body(c.req.body);
  const JsonFields f(body);
  f.only({"facts", "conversation", "turns"});
  const json* facts = f.get("facts");
  const json* turns = f.get("turns");
  if ((facts != nullptr) == (turns != nullptr))
    throw bad_request("give either \"facts\", or \"conversation\" with \"turns\"", facts ? "turns" : "facts");
  std::vector<NewFact> records;
  std::optional<std::string> conversation;
  if (facts) {
    if (f.get("conversation")) f.fail("conversation", "goes with \"turns\", not with \"facts\"");
    records = parse_records(*facts, "facts");
  } else {
    conversation = f.string("conversation");
    if (!conversation) f.fail("conversation", "is required with \"turns\"");
    check_name(*conversation, "conversation");
    records = parse_records(*turns, "turns");
  }
  write_and_send(
      c,
      [&](Idempotency* idem) {
        return WriteResult{conversation ? c.store.add_turns(c.tenant, c.user, *conversation, records, idem)
                                        : c.store.add_facts(c.tenant, c.user, records, idem),
                           {}, 0};
      },
      [](const WriteResult& r) { return ojson{{"ids", r.ids}}; }, true);
}

void list_facts(Call& c) {
  const int64_t after = query_int(c.req, "after", 0, std::numeric_limits<int64_t>::max()).value_or(0);
  const auto limit = static_cast<size_t>(query_int(c.req, "limit", 1, kMaxListLimit).value_or(kDefaultListLimit));
  require_user(c);
  // One more than asked tells whether another page follows.
  std::vector<Fact> facts = c.store.list(c.tenant, c.user, ListOptions{after, limit + 1});
  const bool more = facts.size() > limit;
  if (more) facts.resize(limit);
  ojson data = ojson::array();
  for (const Fact& fact : facts) data.push_back(fact_to_json(fact));
  send(c.res, {{"object", "list"},
               {"data", std::move(data)},
               {"has_more", more},
               {"next_after", more ? ojson(facts.back().id) : ojson(nullptr)}});
}

void get_fact(Call& c) {
  const int64_t id = c.id();
  send(c.res, fact_to_json(on_fact([&] { return c.store.get(c.tenant, c.user, id); })));
}

void update_fact(Call& c) {
  const int64_t id = c.id();
  const json body = parse_json_body(c.req.body);
  const JsonFields f(body);
  f.only({"text", "metadata"});
  FactUpdate u;
  u.text = f.string("text");
  if (u.text && u.text->size() > FactStore::kMaxTextBytes)
    too_large(fmt::format("'text' is {} bytes; at most {}", u.text->size(), FactStore::kMaxTextBytes), "text", "fact_too_large");
  if (auto it = body.find("metadata"); it != body.end()) {
    u.metadata = it->is_null() ? std::string() : it->dump();  // null clears
    try {
      check_fact_metadata(*u.metadata, "");
    } catch (const Error& e) {
      throw bad_request(e.what(), "metadata");
    }
  }
  if (!u.text && !u.metadata) throw bad_request("nothing to change: give \"text\" and/or \"metadata\"");
  write_and_send(
      c, [&](Idempotency* idem) { return WriteResult{{}, on_fact([&] { return c.store.update(c.tenant, c.user, id, u, idem); }), 0}; },
      [](const WriteResult& r) { return fact_to_json(*r.fact); }, u.text.has_value());
}

void delete_fact(Call& c) {
  const int64_t id = c.id();
  write_and_send(
      c,
      [&](Idempotency* idem) {
        on_fact([&] { c.store.remove(c.tenant, c.user, id, idem); });
        return WriteResult{{}, {}, 1};
      },
      [id](const WriteResult&) { return ojson{{"id", id}, {"deleted", true}}; }, false);
}

void search(Call& c) {
  const json body = parse_json_body(c.req.body);
  const JsonFields f(body);
  f.only({"query", "vector", "k"});
  const auto query = f.string("query");
  const auto vector = f.floats("vector", MemorySpec::kMaxVectorDim);
  if (query && vector) f.fail("vector", "give 'query' or 'vector', not both");
  if (!vector && (!query || query->empty())) f.fail("query", "is required (a non-empty string), or give 'vector'");
  const auto k = static_cast<size_t>(f.integer("k", 1, MemoryRequest::kMaxK).value_or(kDefaultSearchK));
  require_user(c);
  c.store.refresh();  // another process's writes reach the retriever's indexes first
  const std::vector<ScoredFact> hits =
      vector ? c.retriever.search_vector(c.tenant, c.user, *vector, k) : c.retriever.search(c.tenant, c.user, *query, k);
  ojson data = ojson::array();
  for (const FactHit& hit : fetch_hits(c.store, c.tenant, c.user, hits)) {  // facts deleted since the search are gone
    const ojson full = fact_to_json(hit.fact);
    ojson h = {{"id", hit.fact.id}, {"score", hit.score}};
    for (const char* key : {"text", "speaker", "date", "source"}) h[key] = full[key];
    data.push_back(std::move(h));
  }
  send(c.res, {{"object", "list"}, {"data", std::move(data)}});
}

// ---- routing ----

// Shapes are the path after /v1/memory; {user} and {id} are parameters.
constexpr Route<Call> kRoutes[] = {
    {"GET", "users", list_users},
    {"GET", "users/{user}", get_user},
    {"DELETE", "users/{user}", delete_user},
    {"POST", "users/{user}/facts", add_facts},
    {"GET", "users/{user}/facts", list_facts},
    {"GET", "users/{user}/facts/{id}", get_fact},
    {"PATCH", "users/{user}/facts/{id}", update_fact},
    {"DELETE", "users/{user}/facts/{id}", delete_fact},
    {"POST", "users/{user}/search", search},
};

}  // namespace

void refresh_retriever(const Retriever& retriever, std::string_view tenant, std::string_view user) {
  try {
    retriever.refresh(tenant, user);
  } catch (const Error& e) {
    spdlog::warn("memory: {} could not index user '{}' after a write (retried at the next search): {}", retriever.name(),
                 user, e.what());
  }
}

void MemoryHandler::handle(const httplib::Request& req, httplib::Response& res) const {
  const std::vector<std::string> segs = path_segments(req.target);
  // Registered for /v1/memory(/...)?: the first two segments are "v1", "memory".
  const std::span<const std::string> rest = std::span(segs).subspan(std::min<size_t>(2, segs.size()));
  std::vector<std::string> params;  // {user} comes before {id} in every shape
  const Route<Call>* route = &find_route(std::span<const Route<Call>>(kRoutes), rest, req, res, params);
  if (!memory_) throw bad_request("memory is not enabled on this server", {}, "memory_disabled");
  const bool has_user = route->shape.find("{user}") != std::string_view::npos;
  std::string user = has_user ? params.at(0) : std::string();
  std::string id = params.size() > (has_user ? 1u : 0u) ? params.back() : std::string();
  Call c{req, res, memory_->store(), memory_->retriever(), request_tenant(req), std::move(user), std::move(id)};
  if (route->shape.find("{user}") != std::string_view::npos) check_name(c.user, "user");
  route->run(c);
}

}  // namespace inferscale::server
