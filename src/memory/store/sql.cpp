#include "memory/store/sql.h"

#include "util/check.h"

namespace inferscale::sql {

Query Db::prepare(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end()) it = cache_.emplace(std::string(sql), make_statement(sql)).first;
  return Query(*it->second);
}

Query::Query(Statement& s) : s_(&s) {
  IS_CHECK(!s.lent_, "statement already in use");
  s.lent_ = true;
}

Query::~Query() {
  if (s_ == nullptr) return;
  s_->reset();
  s_->lent_ = false;
}

}  // namespace inferscale::sql
