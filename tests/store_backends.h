// The store tests' two engines: each test of the store's contract runs once on SQLite (a fresh
// data directory) and once on PostgreSQL (a fresh database on the test server), through
// INSTANTIATE_STORE_TESTS. The PostgreSQL server is the ctest fixture `postgres`
// (scripts/private_postgres.sh, a socket in the build tree) named by INFERSCALE_TEST_POSTGRES (its
// admin URL); without it the PostgreSQL cases skip with a message.
#pragma once
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "memory/store/fact_store.h"
#include "memory/store/postgres.h"
#include "memory/store/sqlite.h"
#include "test_fact_store_util.h"

namespace inferscale::testing {

enum class Backend { kSqlite, kPostgres };

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kSqlite ? "sqlite" : "postgres";
}

// The test server's admin URL, or empty.
inline std::string test_postgres_url() {
  const char* u = std::getenv("INFERSCALE_TEST_POSTGRES");
  return u != nullptr ? u : "";
}

// `url` (postgresql://USER@HOST/DB?PARAMS) naming database `db` instead.
inline std::string with_database(const std::string& url, const std::string& db) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme + 3);
  const size_t query = url.find('?', scheme + 3);
  const std::string head = url.substr(0, slash != std::string::npos ? slash : query);
  const std::string tail = query != std::string::npos ? url.substr(query) : "";
  return head + "/" + db + tail;
}

// Runs one statement on the admin database (CREATE / DROP DATABASE cannot run in a transaction).
inline void postgres_admin(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string m = PQerrorMessage(c);
    PQfinish(c);
    throw std::runtime_error("test postgres unreachable: " + m);
  }
  PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);  // "does not exist, skipping"
  PGresult* r = PQexec(c, sql.c_str());
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  std::string m = PQerrorMessage(c);
  PQclear(r);
  PQfinish(c);
  if (!ok) throw std::runtime_error(sql + ": " + m);
}

// Where one test's store lives: a temporary directory, or a database of its own on the test
// server (dropped at the end, with every connection to it).
class StoreLocation {
 public:
  explicit StoreLocation(Backend b) : backend_(b) {
    if (b == Backend::kSqlite) {
      dir_ = std::make_unique<TempDir>();
      return;
    }
    admin_ = test_postgres_url();
    static std::atomic<int> counter{0};
    db_ = "is_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    postgres_admin(admin_, "DROP DATABASE IF EXISTS " + db_ + " WITH (FORCE)");
    postgres_admin(admin_, "CREATE DATABASE " + db_);
  }
  ~StoreLocation() {
    if (backend_ != Backend::kPostgres) return;
    try {
      postgres_admin(admin_, "DROP DATABASE IF EXISTS " + db_ + " WITH (FORCE)");
    } catch (const std::exception&) {
    }
  }
  StoreLocation(const StoreLocation&) = delete;
  StoreLocation& operator=(const StoreLocation&) = delete;

  Backend backend() const { return backend_; }
  // The data directory, or the database's URL: what `serve --store` / FactStore::open_at take.
  std::string where() const { return dir_ ? dir_->str() : with_database(admin_, db_); }
  std::unique_ptr<FactStore> open(const FactStoreOptions& opts = {}) const { return FactStore::open_at(where(), opts); }
  // Runs SQL on the store's database behind the store's back (what pruning or time would do).
  void exec_raw(const std::string& sql) const {
    if (dir_) {
      sqlite::Db(where() + "/" + FactStore::kFileName, false).exec(sql);
    } else {
      postgres_admin(where(), sql);
    }
  }

 private:
  Backend backend_;
  std::unique_ptr<TempDir> dir_;
  std::string admin_, db_;
};

// Holds the store's write lock from a connection of its own until destroyed, as a writer stuck
// inside its transaction would (SQLite: BEGIN IMMEDIATE; PostgreSQL: the advisory lock).
class WriteLockHolder {
 public:
  explicit WriteLockHolder(const StoreLocation& at) {
    if (at.backend() == Backend::kSqlite) {
      sqlite_ = std::make_unique<sqlite::Db>(at.where() + "/" + FactStore::kFileName, false);
      sqlite_->exec("BEGIN IMMEDIATE");
      return;
    }
    pg_ = PQconnectdb(at.where().c_str());
    if (PQstatus(pg_) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(pg_));
    PQclear(PQexec(pg_, "BEGIN"));
    PGresult* r = PQexec(pg_, ("SELECT pg_advisory_xact_lock(" + std::to_string(postgres::kWriteLockKey) + ")").c_str());
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    if (!ok) throw std::runtime_error(PQerrorMessage(pg_));
  }
  ~WriteLockHolder() {
    if (sqlite_) sqlite_->exec("ROLLBACK");
    if (pg_ != nullptr) PQfinish(pg_);  // ends its transaction and the lock
  }
  WriteLockHolder(const WriteLockHolder&) = delete;
  WriteLockHolder& operator=(const WriteLockHolder&) = delete;

 private:
  std::unique_ptr<sqlite::Db> sqlite_;
  PGconn* pg_ = nullptr;
};

// A fixture for tests of the store's contract: `where` is this test's store location.
class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    skip_without_postgres();
    if (IsSkipped()) return;
    where = std::make_unique<StoreLocation>(GetParam());
  }
  // Skips a PostgreSQL case when there is no test server (the caller checks IsSkipped()).
  void skip_without_postgres() {
    if (GetParam() == Backend::kPostgres && test_postgres_url().empty())
      GTEST_SKIP() << "no test PostgreSQL server (INFERSCALE_TEST_POSTGRES unset; ctest starts one)";
  }
  std::unique_ptr<FactStore> open_store(const FactStoreOptions& opts = {}) { return where->open(opts); }
  bool on_postgres() const { return GetParam() == Backend::kPostgres; }
  std::unique_ptr<StoreLocation> where;
};

}  // namespace inferscale::testing

// Runs every TEST_P of `fixture` (a StoreTest) on both engines: Name/sqlite and Name/postgres.
#define INSTANTIATE_STORE_TESTS(fixture)                                                              \
  INSTANTIATE_TEST_SUITE_P(, fixture,                                                                 \
                           ::testing::Values(::inferscale::testing::Backend::kSqlite,                \
                                             ::inferscale::testing::Backend::kPostgres),             \
                           ::inferscale::testing::backend_name)
