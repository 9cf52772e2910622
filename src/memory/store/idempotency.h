// Idempotency keys for writes (table `idempotency`, schema v4). A client names a write with a key
// of its own (HTTP Idempotency-Key); the store keeps the write's answer under (tenant, key) in the
// write's own transaction, so a retry after a lost answer (a crash, a timeout, a dropped
// connection) gets that first answer and writes nothing. A key lives kIdempotencyTtlMs; the same
// key with another request within that time is refused (IdempotencyKeyReused).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"
#include "util/check.h"

namespace inferscale {

namespace sql {
class Db;
}

inline constexpr int64_t kIdempotencyTtlMs = 24LL * 3600 * 1000;

// What a FactStore write did, from which its answer is made.
struct WriteResult {
  std::vector<int64_t> ids;  // add_facts, add_turns: the new ids in input order
  std::optional<Fact> fact;  // update: the fact as updated
  size_t deleted = 0;        // remove (1), remove_user: facts deleted
};

// A write's idempotency key, handed to a FactStore write.
struct Idempotency {
  std::string key;           // the client's key, unique per tenant
  std::string request_hash;  // what was asked (the caller hashes method, path, body)
  // The answer of a write that runs, made from its result inside its transaction.
  std::function<std::string(const WriteResult&)> render;
  // Set by the store: what to answer, and whether it is the stored answer of an earlier write
  // under this key (then nothing was written and the write's return value is empty).
  std::string answer;
  bool replayed = false;
};

// The key was used within its lifetime for another request (kInvalidInput).
class IdempotencyKeyReused : public Error {
 public:
  explicit IdempotencyKeyReused(const std::string& message) : Error(ErrorKind::kInvalidInput, message) {}
};

namespace idempotency {

struct Record {
  std::string request_hash;
  std::string answer;
};

// The live record of (tenant, key) at `now_ms`, if any.
std::optional<Record> find(sql::Db& db, std::string_view tenant, std::string_view key, int64_t now_ms);
// Stores (or replaces an expired) record, inside the caller's write transaction.
void put(sql::Db& db, std::string_view tenant, std::string_view key, const Record& record, int64_t now_ms);
// Deletes the records that expired before `now_ms`.
void prune(sql::Db& db, int64_t now_ms);

}  // namespace idempotency
}  // namespace inferscale
