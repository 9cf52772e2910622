// Mem0's request and response shapes, for both API surfaces Mem0 clients use (its self-hosted
// server and its platform API as the mem0ai MemoryClient calls it), translated to and from
// InferScale's facts. The routes are in mem0_handler.h; nothing here touches the store.
//
// Entities. InferScale's memory belongs to users (inside the request's tenant); Mem0's belongs to
// any mix of user_id, agent_id and run_id:
//   - The user that holds a memory (its "owner") is user_id; with no user_id, "agent:{agent_id}";
//     with neither, "run:{run_id}". So `memory: {"user_id": "alice"}` on a chat request reads
//     exactly what a Mem0 client added with user_id "alice".
//   - agent_id and run_id are stored with the memory, in its metadata under those keys, together
//     with role and actor_id (the message's role and name), as Mem0 keeps them in its payload; the
//     Mem0 responses lift these keys out of `metadata` into top-level fields.
//   - Reads and deletes narrow the owner's memories by the other ids given ({"user_id": "alice",
//     "agent_id": "travel"}: alice's memories added with agent_id "travel") and by metadata
//     equality filters ({"topic": "pets"}; "*" = the key is present). Mem0's reads across users
//     ({"agent_id": "travel"} alone meaning every user's memories with that agent) read the
//     agent's own memories (owner "agent:travel") instead.
//
// Ids: a memory's id is its fact id (per tenant) as a decimal string ("17").
// Times: ISO 8601 in UTC with microseconds, "2024-03-02T14:26:07.123000+00:00", as Mem0 writes them.
#pragma once
#include <httplib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/store/fact.h"

namespace inferscale::server {

struct Mem0Scope {
  std::optional<std::string> user_id, agent_id, run_id;
  // Metadata equality filters: key -> value ("*": any value, the key present).
  std::vector<std::pair<std::string, nlohmann::json>> metadata;

  // The InferScale user holding the scope's memories (see above).
  std::string owner() const;
  // Whether reads must filter the owner's facts (contains()) rather than take them all.
  bool narrows() const;
  // Whether one of the owner's facts is in the scope.
  bool contains(const Fact& f) const;
};

// The scope of a call, gathered from the query parameters (user_id, agent_id, run_id), the body's
// top-level entity ids and its "filters" object (entity ids; other keys are metadata equality
// filters; "AND": [filters...] is flattened). `body` may be null. The same id twice with two values,
// OR / NOT, operators ({"in": ...}), wildcard entity ids and app_id are 400s naming the field; no
// entity id at all is a 400 (code missing_entity).
Mem0Scope mem0_scope(const httplib::Request& req, const nlohmann::json* body);

struct Mem0Message {
  std::string role;
  std::string name;  // "" when none
  std::string content;
};

// The body's "messages": an array of {"role", "content", "name"?}, one such object, or a string
// (one user message). 400 naming "messages[i]..." for anything else (non-text content included).
std::vector<Mem0Message> mem0_messages(const nlohmann::json& body);

// What an add stores (`infer` true or false alike: no LLM extraction): one conversation turn per
// message, system messages and blank ones left out; the speaker is the message's name, else its
// role; the date is `at_s`; the metadata the client's (`client_metadata`: an object or null) with
// Mem0's entity keys set from the call (mem0_metadata).
std::vector<NewFact> mem0_turns(const std::vector<Mem0Message>& messages, const Mem0Scope& scope,
                                const nlohmann::json& client_metadata, int64_t at_s);

// The metadata JSON text stored with a memory: the client's object with the keys user_id, agent_id,
// run_id, role and actor_id replaced by the call's (absent when the call has none).
std::string mem0_metadata(const nlohmann::json& client_metadata, const Mem0Scope& scope, std::string_view role,
                          std::string_view actor);
// An update's metadata: the client's new object, keeping the entity keys `stored` (a fact's metadata
// text) holds: Mem0's entity ids do not change after the add.
std::string mem0_updated_metadata(const nlohmann::json& client_metadata, std::string_view stored);

// A memory as Mem0 returns it: {"id", "memory", "user_id", "agent_id", "run_id", "role"?,
// "actor_id"?, "metadata", "created_at", "updated_at"}; user_id is null for an agent's or a run's
// own memories, metadata null when nothing is left after the lifted keys.
nlohmann::ordered_json mem0_memory_json(const Fact& f);
// One history entry: {"id", "memory_id", "old_memory", "new_memory", "event", "created_at",
// "updated_at", "is_deleted", "user_id", "agent_id", "run_id", "role"?, "actor_id"?, "metadata"} (the
// union of what Mem0's server and its platform return).
nlohmann::ordered_json mem0_history_json(const FactEvent& e);

std::string mem0_id(int64_t fact_id);
// A memory id from a path; 400 (code invalid_id) unless it is a positive decimal integer.
int64_t parse_mem0_id(std::string_view text);

}  // namespace inferscale::server
