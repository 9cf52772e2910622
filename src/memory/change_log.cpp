#include "memory/change_log.h"

#include <chrono>

#include "memory/sqlite.h"
#include "util/check.h"

namespace inferscale::change_log {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void append(sqlite::Db& db, Op op, std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
            std::span<const int64_t> keys, std::string_view embedder) {
  IS_CHECK(ids.size() == keys.size(), "{} ids and {} keys", ids.size(), keys.size());
  auto ins = db.prepare(
      "INSERT INTO changes (op, tenant, user, fact_id, fact_key, embedder, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)");
  const int64_t at = now_ms();
  for (size_t i = 0; i < ids.size(); ++i) {
    ins->reset();
    ins->bind(1, static_cast<int64_t>(op)).bind(2, tenant).bind(3, user).bind(4, ids[i]).bind(5, keys[i]);
    ins->bind(6, embedder).bind(7, at).run();
  }
}

int64_t last_seq(sqlite::Db& db) {
  auto q = db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'changes'");
  return q->step() ? q->int64(0) : 0;
}

std::vector<Change> since(sqlite::Db& db, int64_t seq) {
  auto q = db.prepare("SELECT seq, op, tenant, user, fact_id, fact_key, embedder FROM changes WHERE seq > ? ORDER BY seq");
  q->bind(1, seq);
  std::vector<Change> out;
  while (q->step()) {
    const int64_t op = q->int64(1);
    IS_CHECK(op >= 1 && op <= 5, "change {} has an unknown op {}", q->int64(0), op);
    out.push_back(Change{q->int64(0), static_cast<Op>(op), q->text(2), q->text(3), q->int64(4), q->int64(5), q->text(6)});
  }
  return out;
}

void prune(sqlite::Db& db, int64_t before_ms) { db.prepare("DELETE FROM changes WHERE at_ms < ?")->bind(1, before_ms).run(); }

}  // namespace inferscale::change_log
