// The plain data of the persistent memory: facts, their provenance and the inputs that create or
// change them. No behaviour here; FactStore (memory/store/fact_store.h) owns the rules.
//
// Identity and versioning (what the KV write path keys on):
//   - `id` is what clients see: 1, 2, 3, ... per tenant in the order the tenant's facts were
//     added, never reused within the tenant, so a tenant's ids say nothing of other tenants.
//   - `key` is unique across the whole store and never reused, even after a delete (SQLite
//     AUTOINCREMENT), so KV cached under a key can never be mistaken for another fact's. Caches
//     of the KV (pool entries, KV files) use it; it never leaves the server.
//   - `version` starts at 1 and grows by one on every update that changes the text or metadata.
//     Fact KV is keyed by (key, version, window, model fingerprint): a new version means stale KV.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {

// Facts belong to a user, users to a tenant. No read of one (tenant, user) ever returns another's facts.
inline constexpr const char* kDefaultTenant = "default";
// Embedder name under which vectors supplied by the client (with facts and queries) are stored.
inline constexpr const char* kClientEmbedder = "client";

struct UserRef {
  std::string tenant;
  std::string user;
  bool operator==(const UserRef&) const = default;
};

// One string per (tenant, user) for in-memory maps. Names never hold control characters
// (FactStore rejects them), so the '\0' separator makes the key unambiguous.
inline std::string user_map_key(std::string_view tenant, std::string_view user) {
  std::string k;
  k.reserve(tenant.size() + 1 + user.size());
  k.append(tenant).push_back('\0');
  k.append(user);
  return k;
}

// Where a fact came from. Every field is optional ("" when unknown).
struct FactSource {
  std::string conversation;  // conversation id (LoCoMo: sample_id "conv-26")
  std::string session;       // session id inside the conversation (LoCoMo: "session_3")
  std::string turn;          // turn id (LoCoMo: dia_id "D3:7")
  std::string speaker;
  bool operator==(const FactSource&) const = default;
};

struct Fact {
  int64_t id = 0;   // within the tenant
  int64_t key = 0;  // within the store
  std::string tenant;
  std::string user;
  std::string text;
  std::string timestamp;                   // the fact's own time as given, "" when none
  std::optional<int64_t> timestamp_epoch;  // the same in seconds since 1970 (UTC), when parseable
  FactSource source;
  // Position inside source.conversation when the fact was added as a conversation turn
  // (FactStore::add_turns); unset for free-standing facts. Increases with each appended turn.
  std::optional<int64_t> turn_index;
  std::string metadata;  // JSON text, "" when none
  int64_t created_at_ms = 0;  // wall clock, ms since 1970
  int64_t updated_at_ms = 0;
  int64_t version = 1;
};

// Input of FactStore::add_facts / add_turns.
struct NewFact {
  std::string text;
  std::string timestamp;  // parsed into timestamp_epoch when the format is known
  FactSource source;      // for add_turns, source.conversation is set by the store
  std::string metadata;   // must be valid JSON when not empty
  std::vector<float> vector;  // optional client vector, stored under kClientEmbedder
};

// Input of FactStore::update: the fields given are replaced; the version grows when anything changes.
struct FactUpdate {
  std::optional<std::string> text;
  std::optional<std::string> metadata;
};

// Keyset pagination: facts with id > after_id, ascending by id, at most `limit`.
// Pass the last id of one page as after_id of the next; stable under concurrent inserts and deletes.
struct ListOptions {
  int64_t after_id = 0;
  size_t limit = 100;
};

// One entry of a fact's history (memory/store/fact_history.h): what a change did to it.
enum class FactEventKind { kAdd, kUpdate, kDelete };
inline const char* fact_event_name(FactEventKind k) {
  return k == FactEventKind::kAdd ? "ADD" : k == FactEventKind::kUpdate ? "UPDATE" : "DELETE";
}
inline std::optional<FactEventKind> parse_fact_event(std::string_view s) {
  if (s == "ADD") return FactEventKind::kAdd;
  if (s == "UPDATE") return FactEventKind::kUpdate;
  if (s == "DELETE") return FactEventKind::kDelete;
  return std::nullopt;
}
struct FactEvent {
  int64_t seq = 0;  // store-wide order of events
  std::string tenant;
  std::string user;
  int64_t fact_id = 0;  // Fact::id
  FactEventKind kind = FactEventKind::kAdd;
  std::optional<std::string> old_text, new_text;          // old: unset for ADD; new: unset for DELETE
  std::optional<std::string> old_metadata, new_metadata;  // JSON text, "" when none
  int64_t at_ms = 0;                                      // wall clock, ms since 1970
};

// One vector for FactStore::put_embeddings.
struct EmbeddingRow {
  int64_t fact_id = 0;  // Fact::id
  // The fact version the vector was computed from; 0 = do not check. A row whose fact has moved on
  // to another version, or was deleted, is skipped (it changed while the embedder was running).
  int64_t fact_version = 0;
  std::vector<float> vector;
};

// All vectors of one user for one embedder: fact ids (Fact::id) and a row-major [ids.size(), dim] matrix.
struct EmbeddingMatrix {
  int32_t dim = 0;
  std::vector<int64_t> ids;
  std::vector<float> data;
};

}  // namespace inferscale
