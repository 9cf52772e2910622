#include "memory/store/idempotency.h"

#include "memory/store/sql.h"

namespace inferscale::idempotency {

std::optional<Record> find(sql::Db& db, std::string_view tenant, std::string_view key, int64_t now_ms) {
  auto q = db.prepare("SELECT request_hash, answer FROM idempotency WHERE tenant = ? AND key = ? AND created_at_ms > ?");
  q->bind(1, tenant).bind(2, key).bind(3, now_ms - kIdempotencyTtlMs);
  if (!q->step()) return std::nullopt;
  return Record{q->text(0), q->text(1)};
}

void put(sql::Db& db, std::string_view tenant, std::string_view key, const Record& record, int64_t now_ms) {
  db.prepare(
        "INSERT INTO idempotency (tenant, key, request_hash, answer, created_at_ms) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (tenant, key) DO UPDATE SET request_hash = excluded.request_hash, answer = excluded.answer, "
        "created_at_ms = excluded.created_at_ms")
      ->bind(1, tenant)
      .bind(2, key)
      .bind(3, record.request_hash)
      .bind(4, record.answer)
      .bind(5, now_ms)
      .run();
}

void prune(sql::Db& db, int64_t now_ms) {
  db.prepare("DELETE FROM idempotency WHERE created_at_ms <= ?")->bind(1, now_ms - kIdempotencyTtlMs).run();
}

}  // namespace inferscale::idempotency
