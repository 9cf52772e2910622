#include "memory/store/change_log.h"

#include <chrono>

#include "memory/store/sql.h"
#include "util/check.h"

namespace inferscale::change_log {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int64_t append(sql::Db& db, Op op, std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
            std::span<const int64_t> keys, std::string_view embedder) {
  IS_CHECK(ids.size() == keys.size(), "{} ids and {} keys", ids.size(), keys.size());
  if (ids.empty()) return 0;
  int64_t last = 0;
  {
    auto head = db.prepare("UPDATE change_head SET seq = seq + ? RETURNING seq");
    head->bind(1, static_cast<int64_t>(ids.size()));
    IS_CHECK(head->step(), "the change log has no head row");
    last = head->int64(0);
  }
  auto ins = db.prepare(
      "INSERT INTO changes (seq, op, tenant, \"user\", fact_id, fact_key, embedder, at_ms) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  const int64_t at = now_ms();
  const int64_t first = last - static_cast<int64_t>(ids.size()) + 1;
  for (size_t i = 0; i < ids.size(); ++i) {
    ins->reset();
    ins->bind(1, first + static_cast<int64_t>(i)).bind(2, static_cast<int64_t>(op)).bind(3, tenant).bind(4, user);
    ins->bind(5, ids[i]).bind(6, keys[i]).bind(7, embedder).bind(8, at).run();
  }
  db.announce_change();
  return last;
}

int64_t last_seq(sql::Db& db) {
  auto q = db.prepare("SELECT seq FROM change_head");
  return q->step() ? q->int64(0) : 0;
}

std::vector<Change> since(sql::Db& db, int64_t seq) {
  auto q = db.prepare("SELECT seq, op, tenant, \"user\", fact_id, fact_key, embedder FROM changes WHERE seq > ? ORDER BY seq");
  q->bind(1, seq);
  std::vector<Change> out;
  while (q->step()) {
    const int64_t op = q->int64(1);
    IS_CHECK(op >= 1 && op <= 5, "change {} has an unknown op {}", q->int64(0), op);
    out.push_back(Change{q->int64(0), static_cast<Op>(op), q->text(2), q->text(3), q->int64(4), q->int64(5), q->text(6)});
  }
  return out;
}

void prune(sql::Db& db, int64_t before_ms) { db.prepare("DELETE FROM changes WHERE at_ms < ?")->bind(1, before_ms).run(); }

}  // namespace inferscale::change_log
