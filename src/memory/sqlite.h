// A thin RAII layer over the SQLite C API: a connection, prepared statements and transactions.
// Every failing call throws inferscale::Error naming SQLite's message and the statement.
// Not thread-safe by itself: FactStore serializes all use of one connection with its mutex.
//
// No statement outlives its call: Db::prepare lends a cached statement through a Query handle
// that resets it when the handle dies. SQLite keeps a read transaction open for as long as any
// statement of the connection has returned a row and not been reset; in WAL mode that pins the
// connection to the snapshot it started with, so it would miss other processes' commits and its
// next write would fail with "database is locked" (SQLITE_BUSY_SNAPSHOT) whatever the busy timeout.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

struct sqlite3;
struct sqlite3_stmt;

namespace inferscale::sqlite {

class Statement;
class Query;

class Db {
 public:
  // Opens (or creates, when `create`) the database file. kNotFound when absent and !create.
  Db(const std::string& path, bool create);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements that return no rows.
  void exec(std::string_view sql);
  // A cached prepared statement with its bindings cleared, lent until the Query dies (which
  // resets it). The same SQL text cannot be lent twice at once (nested iteration): an internal error.
  Query prepare(std::string_view sql);
  int64_t last_insert_rowid() const;
  int changes() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

  [[noreturn]] void fail(int rc, std::string_view what) const;

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

class Statement {
 public:
  Statement(Db& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bind by 1-based index. Text and blobs are copied (SQLITE_TRANSIENT).
  Statement& bind(int i, int64_t v);
  Statement& bind(int i, std::string_view v);
  Statement& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, std::optional<int64_t> v);
  Statement& bind_blob(int i, std::span<const uint8_t> v);
  Statement& bind_null(int i);

  // Advances to the next row: true when a row is available, false when done.
  bool step();
  // Runs a statement that returns no rows.
  void run();
  void reset();
  bool lent() const { return lent_; }

  bool is_null(int col) const;
  int64_t int64(int col) const;
  std::optional<int64_t> opt_int64(int col) const;
  std::string text(int col) const;
  std::span<const uint8_t> blob(int col) const;  // valid until the next step/reset

 private:
  friend class Query;
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
  bool lent_ = false;  // a Query holds it
};

// A statement lent by Db::prepare for one use; resets it (ending its read of the database) and
// gives it back when destroyed. Use it within one call: `auto q = db.prepare(...); q->bind(...)`.
class Query {
 public:
  explicit Query(Statement& s);
  ~Query();
  Query(Query&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  Query& operator=(Query&&) = delete;
  Statement* operator->() const { return s_; }
  Statement& operator*() const { return *s_; }

 private:
  Statement* s_;
};

// kWrite: BEGIN IMMEDIATE on construction (takes the write lock up front, so no deadlock
// upgrades); kRead: BEGIN (one consistent snapshot for several reads, never blocks a writer in
// WAL mode). ROLLBACK in the destructor unless commit() was called.
class Transaction {
 public:
  enum Kind { kWrite, kRead };
  explicit Transaction(Db& db, Kind kind = kWrite);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Db& db_;
  bool done_ = false;
};

}  // namespace inferscale::sqlite
