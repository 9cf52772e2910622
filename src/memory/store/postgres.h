// The fact store's shared engine: a PostgreSQL server, through libpq (sql.h's interface), for
// replicas that serve one memory. Chosen by a store URL (postgresql://USER[:PASS]@HOST[:PORT]/DB,
// any libpq URI; `?host=/socket/dir` reaches a Unix socket).
//
// Semantics the store relies on, and how they are kept here:
//   - A write that returned is durable: synchronous_commit is set to on for the session.
//   - Writers run one at a time across every process (as SQLite's BEGIN IMMEDIATE): a write
//     transaction takes one transaction-level advisory lock first. So the change log's sequence
//     numbers are given in commit order, and a reader that has seen seq N has seen every commit
//     before it.
//   - A read transaction is REPEATABLE READ READ ONLY: one snapshot.
//   - Other processes' commits ring a doorbell: each write transaction NOTIFYs kChannel, and a
//     thread with its own connection LISTENs and sets a flag. NOTIFY is only a hint (it is not
//     replayed after a reconnect), so others_may_have_written() also answers true after any
//     reconnect of either connection and at least once a second; the store then catches up from
//     the change log (`WHERE seq > last`).
//   - The server going away (restart, network) is kUnavailable, quickly: connect_timeout, TCP
//     keepalives and tcp_user_timeout bound every wait, and lock_timeout / statement_timeout bound
//     a stuck peer. The next call after a failure reconnects (at most every kRetryMs); a
//     transaction that was open when the connection died is lost (its caller got the error) and
//     never resumed on the new connection.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "memory/store/sql.h"

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

namespace inferscale::postgres {

inline constexpr const char* kChannel = "inferscale_changes";
inline constexpr int64_t kRetryMs = 250;      // between reconnect attempts of one connection
inline constexpr int64_t kPollMs = 1000;      // others_may_have_written() is true at least this often
inline constexpr int64_t kWriteLockKey = 7'301'551'947LL;  // pg_advisory_xact_lock's key

// Whether `where` is a PostgreSQL URL (postgresql:// or postgres://).
bool is_url(std::string_view where);
// The URL with any password replaced by "***", for messages and logs.
std::string redact(std::string_view url);

class Statement;
class Doorbell;

class Db final : public sql::Db {
 public:
  // Connects (kUnavailable when the server cannot be reached, naming it and libpq's reason).
  explicit Db(std::string url);
  ~Db() override;

  sql::Dialect dialect() const override { return sql::Dialect::kPostgres; }
  const std::string& describe() const override { return described_; }
  void exec(std::string_view sql) override;
  void begin(sql::TxKind kind) override;
  void commit() override;
  void rollback() override;
  void announce_change() override;
  bool others_may_have_written() override;
  std::string engine_setting(std::string_view name) override;

  // Runs a prepared statement (Statement::step's first call).
  PGresult* execute(Statement& s);

 protected:
  std::unique_ptr<sql::Statement> make_statement(std::string_view sql) override;

 private:
  // The live connection: reconnects when it was lost, unless a transaction was open on it.
  PGconn* live();
  void connect();
  // Throws the error of a failed call (`res` may be null), freeing `res`.
  [[noreturn]] void fail(PGresult* res, std::string_view what);
  PGresult* checked(PGresult* res, std::string_view what);

  std::string url_, described_;
  PGconn* conn_ = nullptr;
  uint64_t generation_ = 0;       // counts connects: statements prepared on an older one re-prepare
  uint64_t seen_generation_ = 0;  // the generation others_may_have_written() last answered for
  bool in_tx_ = false;
  bool tx_broken_ = false;        // the connection died inside the open transaction
  std::chrono::steady_clock::time_point next_attempt_{};
  std::chrono::steady_clock::time_point last_yes_{};
  uint64_t next_statement_ = 0;
  std::unique_ptr<Doorbell> doorbell_;
  friend class Statement;
};

class Statement final : public sql::Statement {
 public:
  // `sql` as written for sql.h (`?` placeholders).
  Statement(Db& db, std::string_view sql, std::string name);
  ~Statement() override;

  using sql::Statement::bind;
  Statement& bind(int i, int64_t v) override;
  Statement& bind(int i, std::string_view v) override;
  Statement& bind_blob(int i, std::span<const uint8_t> v) override;
  Statement& bind_null(int i) override;
  bool step() override;
  void reset() override;
  bool is_null(int col) const override;
  int64_t int64(int col) const override;
  std::string text(int col) const override;
  std::span<const uint8_t> blob(int col) const override;

 private:
  friend class Db;
  void set(int i, std::string value, bool binary);

  Db& db_;
  std::string sql_;   // with $1, $2, ... placeholders
  std::string name_;  // the server-side prepared statement's name
  int nparams_ = 0;
  uint64_t prepared_generation_ = 0;  // 0: not prepared on the current connection
  std::vector<std::string> values_;
  std::vector<char> null_;     // per parameter: bound as NULL
  std::vector<int> formats_;   // per parameter: 1 binary (blobs), 0 text
  PGresult* res_ = nullptr;
  int row_ = -1;
  mutable std::vector<uint8_t> blob_;  // the last blob() decoded from bytea's hex text
};

// `sql` with each `?` outside quotes replaced by $1, $2, ...; `count` gets how many.
std::string numbered_placeholders(std::string_view sql, int& count);

}  // namespace inferscale::postgres
