#include "memory/store/fact_history.h"

#include "memory/store/sql.h"
#include "util/check.h"

namespace inferscale::fact_history {
namespace {

void bind_opt(sql::Statement& s, int i, const std::optional<std::string>& v) {
  if (v) s.bind(i, *v);
  else s.bind_null(i);
}

std::optional<std::string> opt_text(const sql::Statement& s, int col) {
  if (s.is_null(col)) return std::nullopt;
  return s.text(col);
}

}  // namespace

void append(sql::Db& db, const FactEvent& e) {
  auto ins = db.prepare(
      "INSERT INTO fact_events (tenant, \"user\", fact_id, event, old_text, new_text, old_metadata, new_metadata, at_ms) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins->bind(1, e.tenant).bind(2, e.user).bind(3, e.fact_id).bind(4, fact_event_name(e.kind));
  bind_opt(*ins, 5, e.old_text);
  bind_opt(*ins, 6, e.new_text);
  bind_opt(*ins, 7, e.old_metadata);
  bind_opt(*ins, 8, e.new_metadata);
  ins->bind(9, e.at_ms).run();
}

std::vector<FactEvent> of_fact(sql::Db& db, std::string_view tenant, int64_t fact_id) {
  auto q = db.prepare(
      "SELECT seq, \"user\", event, old_text, new_text, old_metadata, new_metadata, at_ms FROM fact_events "
      "WHERE tenant = ? AND fact_id = ? ORDER BY seq");
  q->bind(1, tenant).bind(2, fact_id);
  std::vector<FactEvent> out;
  while (q->step()) {
    FactEvent e;
    e.seq = q->int64(0);
    e.tenant = tenant;
    e.user = q->text(1);
    e.fact_id = fact_id;
    const std::string kind = q->text(2);
    const auto k = parse_fact_event(kind);
    IS_CHECK(k.has_value(), "fact event {} has an unknown kind '{}'", e.seq, kind);
    e.kind = *k;
    e.old_text = opt_text(*q, 3);
    e.new_text = opt_text(*q, 4);
    e.old_metadata = opt_text(*q, 5);
    e.new_metadata = opt_text(*q, 6);
    e.at_ms = q->int64(7);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace inferscale::fact_history
