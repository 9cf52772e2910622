// The fact store's one view of a SQL database, whichever engine holds it: SQLite in a data
// directory (sqlite.h, the embedded default) or a PostgreSQL server shared by replicas
// (postgres.h). FactStore and its tables' helpers (schema, change log, history, idempotency)
// write their SQL once against this interface:
//   - placeholders are `?`, numbered left to right (PostgreSQL's driver renumbers them $1, $2, ...);
//   - identifiers that are keywords in either engine are double-quoted ("user");
//   - ids of new rows come back through RETURNING, never a last-insert-id call;
//   - what differs (schema DDL, the write lock, noticing other processes' commits) sits behind
//     dialect() and the hooks below.
//
// Every failing call throws inferscale::Error naming the engine's message and the statement; a
// database that cannot be reached is kUnavailable (the caller may retry later). Not thread-safe:
// FactStore serializes all use of one connection with its mutex.
//
// No statement outlives its call: Db::prepare lends a cached statement through a Query handle
// that resets it when the handle dies (SQLite pins a snapshot while a statement is mid-result).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace inferscale::sql {

enum class Dialect { kSqlite, kPostgres };

class Query;

class Statement {
 public:
  virtual ~Statement() = default;

  // Bind by 1-based index. Text and blobs are copied.
  virtual Statement& bind(int i, int64_t v) = 0;
  virtual Statement& bind(int i, std::string_view v) = 0;
  Statement& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, std::optional<int64_t> v) { return v ? bind(i, *v) : bind_null(i); }
  virtual Statement& bind_blob(int i, std::span<const uint8_t> v) = 0;
  virtual Statement& bind_null(int i) = 0;

  // Advances to the next row (running the statement on the first call): true when a row is
  // available, false when done.
  virtual bool step() = 0;
  // Runs a statement that returns no rows.
  void run() {
    while (step()) {
    }
  }
  // Ends the statement's run and clears its bindings.
  virtual void reset() = 0;

  virtual bool is_null(int col) const = 0;
  virtual int64_t int64(int col) const = 0;
  std::optional<int64_t> opt_int64(int col) const {
    if (is_null(col)) return std::nullopt;
    return int64(col);
  }
  virtual std::string text(int col) const = 0;
  virtual std::span<const uint8_t> blob(int col) const = 0;  // valid until the next step/reset

 private:
  friend class Query;
  bool lent_ = false;  // a Query holds it
};

// The two kinds of transaction the store runs.
enum class TxKind {
  kWrite,  // takes the store's one write lock up front: writers run one at a time, in every process
  kRead,   // one consistent snapshot for several reads; never blocks a writer
};

class Db {
 public:
  virtual ~Db() = default;
  Db() = default;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  virtual Dialect dialect() const = 0;
  // What the store is, for messages: the file, or the server and database (never a password).
  virtual const std::string& describe() const = 0;
  // Runs one or more statements that return no rows.
  virtual void exec(std::string_view sql) = 0;
  // A cached prepared statement with its bindings cleared, lent until the Query dies (which
  // resets it). The same SQL text cannot be lent twice at once (nested iteration): an internal error.
  Query prepare(std::string_view sql);

  // Transactions (use sql::Transaction).
  virtual void begin(TxKind kind) = 0;
  virtual void commit() = 0;
  virtual void rollback() = 0;  // never throws

  // Inside a write transaction that appended to the change log: tells the other processes
  // (PostgreSQL: NOTIFY, delivered at commit; SQLite: nothing, readers poll data_version).
  virtual void announce_change() = 0;
  // Whether another process may have committed since the last call that answered true: cheap,
  // called before every retrieval. False positives are harmless (a catch-up that finds nothing);
  // a false negative is allowed for at most about a second.
  virtual bool others_may_have_written() = 0;
  // A setting of the engine that decides durability (SQLite: a PRAGMA; PostgreSQL: SHOW), for
  // diagnostics and tests. `name` is checked by the caller.
  virtual std::string engine_setting(std::string_view name) = 0;

 protected:
  virtual std::unique_ptr<Statement> make_statement(std::string_view sql) = 0;
  // Finalizes every cached statement (a derived destructor calls it before closing the connection).
  void clear_statements() { cache_.clear(); }

 private:
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

// A statement lent by Db::prepare for one use; resets it and gives it back when destroyed.
// Use it within one call: `auto q = db.prepare(...); q->bind(...)`.
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

// A transaction of `kind` for the scope: rolled back on destruction unless commit() was called.
class Transaction {
 public:
  explicit Transaction(Db& db, TxKind kind = TxKind::kWrite) : db_(db) { db_.begin(kind); }
  ~Transaction() {
    if (!done_) db_.rollback();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit() {
    db_.commit();
    done_ = true;
  }

 private:
  Db& db_;
  bool done_ = false;
};

}  // namespace inferscale::sql
