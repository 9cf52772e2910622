#include "memory/sqlite.h"

#include <sqlite3.h>

#include <spdlog/spdlog.h>

#include "util/check.h"

namespace inferscale::sqlite {

namespace {
ErrorKind kind_of(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_FULL:
    case SQLITE_NOMEM:
    case SQLITE_IOERR:
      return ErrorKind::kResource;
    case SQLITE_CANTOPEN:
      return ErrorKind::kNotFound;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
      return ErrorKind::kInvalidInput;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return ErrorKind::kInvalidInput;
    default:
      return ErrorKind::kInternal;
  }
}
}  // namespace

Db::Db(const std::string& path, bool create) : path_(path) {
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (create) flags |= SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    IS_THROW(kNotFound, "cannot open database {}: {}", path, msg);
  }
  sqlite3_extended_result_codes(db_, 1);
}

Db::~Db() {
  cache_.clear();  // statements must be finalized before the connection closes
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

void Db::fail(int rc, std::string_view what) const {
  const std::string msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  throw Error(kind_of(rc), fmt::format("database {}: {} (while {})", path_, msg, what));
}

void Db::exec(std::string_view sql) {
  char* err = nullptr;
  const std::string s(sql);
  const int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw Error(kind_of(rc), fmt::format("database {}: {} (while running: {})", path_, msg, s.substr(0, 80)));
  }
}

Query Db::prepare(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end()) it = cache_.emplace(std::string(sql), std::make_unique<Statement>(*this, sql)).first;
  return Query(*it->second);
}

Query::Query(Statement& s) : s_(&s) {
  IS_CHECK(!s.lent_, "statement already in use: {}", s.sql_);
  s.lent_ = true;
}

Query::~Query() {
  if (s_ == nullptr) return;
  s_->reset();
  s_->lent_ = false;
}

int64_t Db::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int Db::changes() const { return sqlite3_changes(db_); }

Statement::Statement(Db& db, std::string_view sql) : db_(db), sql_(sql) {
  const int rc = sqlite3_prepare_v3(db.handle(), sql_.data(), static_cast<int>(sql_.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  if (rc != SQLITE_OK) db_.fail(rc, "preparing: " + sql_);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int i, int64_t v) {
  const int rc = sqlite3_bind_int64(stmt_, i, v);
  if (rc != SQLITE_OK) db_.fail(rc, "binding: " + sql_);
  return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
  // An empty view may have no data pointer, which SQLite would bind as NULL: text is never NULL.
  const int rc = sqlite3_bind_text64(stmt_, i, v.data() != nullptr ? v.data() : "", v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) db_.fail(rc, "binding: " + sql_);
  return *this;
}

Statement& Statement::bind(int i, std::optional<int64_t> v) { return v ? bind(i, *v) : bind_null(i); }

Statement& Statement::bind_blob(int i, std::span<const uint8_t> v) {
  const int rc = sqlite3_bind_blob64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) db_.fail(rc, "binding: " + sql_);
  return *this;
}

Statement& Statement::bind_null(int i) {
  const int rc = sqlite3_bind_null(stmt_, i);
  if (rc != SQLITE_OK) db_.fail(rc, "binding: " + sql_);
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3_reset(stmt_);
  db_.fail(rc, "running: " + sql_);
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Statement::int64(int col) const { return sqlite3_column_int64(stmt_, col); }
std::optional<int64_t> Statement::opt_int64(int col) const {
  if (is_null(col)) return std::nullopt;
  return int64(col);
}

std::string Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
}

std::span<const uint8_t> Statement::blob(int col) const {
  const auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p != nullptr ? std::span<const uint8_t>(p, static_cast<size_t>(n)) : std::span<const uint8_t>();
}

Transaction::Transaction(Db& db, Kind kind) : db_(db) { db_.exec(kind == kWrite ? "BEGIN IMMEDIATE" : "BEGIN"); }

Transaction::~Transaction() {
  if (done_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (const std::exception& e) {
    spdlog::error("rollback failed: {}", e.what());
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace inferscale::sqlite
