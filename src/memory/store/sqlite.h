// The fact store's embedded engine: a SQLite database file, through the C API (sql.h's
// interface). Every failing call throws inferscale::Error naming SQLite's message and the
// statement.
//
// Several processes may open one file: WAL journal, a busy timeout, BEGIN IMMEDIATE for writes
// (SQLite's one writer at a time) and no statement left open past its call (sql::Query): in WAL
// mode an open statement pins the connection to its snapshot, so it would miss other processes'
// commits and its next write would fail with SQLITE_BUSY_SNAPSHOT whatever the busy timeout.
// Other processes' commits show in PRAGMA data_version.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "memory/store/sql.h"

struct sqlite3;
struct sqlite3_stmt;

namespace inferscale::sqlite {

class Db final : public sql::Db {
 public:
  // Opens (or creates, when `create`) the database file. kNotFound when absent and !create.
  Db(const std::string& path, bool create);
  ~Db() override;

  sql::Dialect dialect() const override { return sql::Dialect::kSqlite; }
  const std::string& describe() const override { return path_; }
  void exec(std::string_view sql) override;
  void begin(sql::TxKind kind) override;
  void commit() override;
  void rollback() override;
  void announce_change() override {}
  bool others_may_have_written() override;
  std::string engine_setting(std::string_view name) override;

  sqlite3* handle() const { return db_; }
  [[noreturn]] void fail(int rc, std::string_view what) const;

 protected:
  std::unique_ptr<sql::Statement> make_statement(std::string_view sql) override;

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  int64_t data_version_ = -1;  // PRAGMA data_version at the last others_may_have_written()
};

class Statement final : public sql::Statement {
 public:
  Statement(Db& db, std::string_view sql);
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
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

}  // namespace inferscale::sqlite
