#include "memory/store/sqlite.h"

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
  clear_statements();  // statements must be finalized before the connection closes
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

// BEGIN IMMEDIATE takes the write lock up front, so a reader never deadlocks upgrading to a
// writer; a plain BEGIN reads one snapshot and never blocks the writer in WAL mode.
void Db::begin(sql::TxKind kind) { exec(kind == sql::TxKind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN"); }
void Db::commit() { exec("COMMIT"); }

void Db::rollback() {
  try {
    exec("ROLLBACK");
  } catch (const std::exception& e) {
    spdlog::error("rollback failed: {}", e.what());
  }
}

// PRAGMA data_version moves whenever another connection commits to the file.
bool Db::others_may_have_written() {
  auto q = prepare("PRAGMA data_version");
  IS_CHECK(q->step(), "no row from PRAGMA data_version");
  const int64_t v = q->int64(0);
  if (v == data_version_) return false;
  data_version_ = v;
  return true;
}

std::string Db::engine_setting(std::string_view name) {
  auto q = prepare(fmt::format("PRAGMA {}", name));
  return q->step() ? q->text(0) : std::string();
}

std::unique_ptr<sql::Statement> Db::make_statement(std::string_view sql) { return std::make_unique<Statement>(*this, sql); }

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

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Statement::int64(int col) const { return sqlite3_column_int64(stmt_, col); }

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

}  // namespace inferscale::sqlite
