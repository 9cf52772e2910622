#include "memory/store/postgres.h"

#include <libpq-fe.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstring>
#include <mutex>

#include "util/check.h"

namespace inferscale::postgres {

namespace {

using Clock = std::chrono::steady_clock;

// libpq's connection keywords, ours first: a URL's own parameters (expanded from "dbname", the
// last) override them.
PGconn* connect_to(const std::string& url) {
  const char* keys[] = {"connect_timeout", "application_name", "keepalives", "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname", nullptr};
  const char* values[] = {"3", "inferscale", "1", "5", "2", "2", "5000", url.c_str(), nullptr};
  return PQconnectdbParams(keys, values, /*expand_dbname=*/1);
}

// libpq's messages on one line: its line breaks and tabs become spaces, runs of them one.
std::string one_line(std::string_view text) {
  std::string m;
  for (char ch : text) {
    const bool space = ch == '\n' || ch == '\t' || ch == ' ';
    if (space && (m.empty() || m.back() == ' ')) continue;
    m += space ? ' ' : ch;
  }
  while (!m.empty() && m.back() == ' ') m.pop_back();
  return m;
}

std::string conn_message(PGconn* c) { return c != nullptr ? one_line(PQerrorMessage(c)) : "out of memory"; }

// The server's notices (and the FATAL a connection gets when the server shuts down) go to the
// log, not to stderr.
void log_notice(void* described, const char* message) {
  spdlog::warn("memory store {}: {}", *static_cast<const std::string*>(described), one_line(message));
}

// SQLSTATE classes: 08 connection, 57P0x the server shutting down or starting: unavailable;
// 53 resources and 40 (serialization, deadlock) and 55P03 (lock timeout): retry later;
// 22 data and 23 integrity: the input. The rest is a bug.
ErrorKind kind_of(PGconn* c, PGresult* res) {
  if (c == nullptr || PQstatus(c) == CONNECTION_BAD) return ErrorKind::kUnavailable;
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  if (state == nullptr) return ErrorKind::kUnavailable;  // no answer from the server at all
  const std::string_view s(state);
  if (s.starts_with("08") || s.starts_with("57P")) return ErrorKind::kUnavailable;
  if (s.starts_with("53") || s.starts_with("40") || s == "55P03" || s == "57014") return ErrorKind::kResource;
  if (s.starts_with("22") || s.starts_with("23")) return ErrorKind::kInvalidInput;
  return ErrorKind::kInternal;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool is_url(std::string_view where) { return where.starts_with("postgresql://") || where.starts_with("postgres://"); }

std::string redact(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t at = url.find('@', scheme + 3);
  const size_t slash = url.find('/', scheme + 3);
  if (at == std::string_view::npos || (slash != std::string_view::npos && slash < at)) return std::string(url);
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string_view::npos || colon > at) return std::string(url);
  return std::string(url.substr(0, colon + 1)) + "***" + std::string(url.substr(at));
}

std::string numbered_placeholders(std::string_view sql, int& count) {
  std::string out;
  count = 0;
  char quote = 0;  // the quote we are inside, or 0
  for (char c : sql) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      out += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      out += c;
    } else if (c == '?') {
      out += '$' + std::to_string(++count);
    } else {
      out += c;
    }
  }
  return out;
}

// ---- the doorbell ------------------------------------------------------------------------------

// A thread with its own connection that LISTENs on kChannel and rings (sets a flag) on every
// notification and on every (re)connect (notifications sent while it was away are lost).
class Doorbell {
 public:
  explicit Doorbell(std::string url) : url_(std::move(url)), thread_([this] { run(); }) {}
  ~Doorbell() {
    stop_ = true;
    thread_.join();
  }
  // Whether it rang since the last call.
  bool take() { return rang_.exchange(false); }

 private:
  void run() {
    PGconn* c = nullptr;
    while (!stop_) {
      if (c == nullptr || PQstatus(c) != CONNECTION_OK) {
        if (c != nullptr) PQfinish(c);
        c = listen();
        if (c == nullptr) {
          sleep_ms(kRetryMs);
          continue;
        }
        rang_ = true;
      }
      pollfd p{PQsocket(c), POLLIN, 0};
      if (::poll(&p, 1, 200) < 0) continue;  // EINTR
      if (PQconsumeInput(c) == 0) continue;  // the connection broke: reconnect above
      while (PGnotify* n = PQnotifies(c)) {
        rang_ = true;
        PQfreemem(n);
      }
    }
    if (c != nullptr) PQfinish(c);
  }
  PGconn* listen() {
    PGconn* c = connect_to(url_);
    if (PQstatus(c) == CONNECTION_OK) {
      PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);  // the main connection logs the same news
      PGresult* r = PQexec(c, fmt::format("LISTEN {}", kChannel).c_str());
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      if (ok) return c;
    }
    PQfinish(c);
    return nullptr;
  }
  void sleep_ms(int64_t ms) {
    for (int64_t t = 0; t < ms && !stop_; t += 50) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  std::string url_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> rang_{true};
  std::thread thread_;
};

// ---- the connection ----------------------------------------------------------------------------

Db::Db(std::string url) : url_(std::move(url)), described_(redact(url_)) {
  connect();
  doorbell_ = std::make_unique<Doorbell>(url_);
}

Db::~Db() {
  doorbell_.reset();
  clear_statements();
  if (conn_ != nullptr) PQfinish(conn_);
}

void Db::connect() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = connect_to(url_);
  next_attempt_ = Clock::now() + std::chrono::milliseconds(kRetryMs);
  if (PQstatus(conn_) != CONNECTION_OK)
    IS_THROW(kUnavailable, "memory store {} is unreachable: {}", described_, conn_message(conn_));
  ++generation_;
  PQsetNoticeProcessor(conn_, log_notice, &described_);
  // Durability and bounded waits for this session (see the header).
  PQclear(checked(PQexec(conn_, "SET synchronous_commit = on; SET lock_timeout = '5s'; "
                                "SET statement_timeout = '30s'; SET idle_in_transaction_session_timeout = '60s'; "
                                "SET client_min_messages = warning"),
                  "setting up the session"));
}

PGconn* Db::live() {
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) return conn_;
  IS_REQUIRE(!in_tx_, kUnavailable, "memory store {}: the connection was lost inside a transaction", described_);
  IS_REQUIRE(Clock::now() >= next_attempt_, kUnavailable, "memory store {} is unreachable: {}", described_,
             conn_message(conn_));
  connect();
  spdlog::info("memory store {}: connected again", described_);
  return conn_;
}

void Db::fail(PGresult* res, std::string_view what) {
  const ErrorKind kind = kind_of(conn_, res);
  const std::string msg =
      res != nullptr && PQresultErrorMessage(res)[0] != '\0' ? one_line(PQresultErrorMessage(res)) : conn_message(conn_);
  if (res != nullptr) PQclear(res);
  if (in_tx_ && kind == ErrorKind::kUnavailable) tx_broken_ = true;
  throw Error(kind, fmt::format("memory store {}: {} (while {})", described_, msg, what));
}

PGresult* Db::checked(PGresult* res, std::string_view what) {
  const ExecStatusType st = res != nullptr ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) fail(res, what);
  return res;
}

void Db::exec(std::string_view sql) {
  const std::string s(sql);
  PQclear(checked(PQexec(live(), s.c_str()), "running: " + s.substr(0, 80)));
}

void Db::begin(sql::TxKind kind) {
  live();
  in_tx_ = false;
  tx_broken_ = false;
  if (kind == sql::TxKind::kWrite) {
    exec("BEGIN");
    in_tx_ = true;
    try {
      exec(fmt::format("SELECT pg_advisory_xact_lock({})", kWriteLockKey));
    } catch (...) {
      rollback();  // no Transaction owns it yet: a lock timeout must not leave it open and aborted
      throw;
    }
  } else {
    exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    in_tx_ = true;
  }
}

void Db::commit() {
  // A COMMIT that fails leaves the transaction's outcome unknown only when the connection died
  // mid-commit; the caller gets kUnavailable either way and never a success.
  exec("COMMIT");
  in_tx_ = false;
}

void Db::rollback() {
  const bool was_broken = tx_broken_;
  in_tx_ = false;
  tx_broken_ = false;
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK || was_broken) return;  // the server dropped it
  PGresult* r = PQexec(conn_, "ROLLBACK");
  if (PQresultStatus(r) != PGRES_COMMAND_OK) spdlog::error("memory store {}: rollback failed: {}", described_, conn_message(conn_));
  PQclear(r);
}

void Db::announce_change() { exec(fmt::format("NOTIFY {}", kChannel)); }

bool Db::others_may_have_written() {
  const auto now = Clock::now();
  bool yes = doorbell_->take() || generation_ != seen_generation_ ||
             now - last_yes_ >= std::chrono::milliseconds(kPollMs);
  if (yes) {
    seen_generation_ = generation_;
    last_yes_ = now;
  }
  return yes;
}

std::string Db::engine_setting(std::string_view name) {
  PGresult* r = checked(PQexec(live(), fmt::format("SHOW {}", name).c_str()), "reading a setting");
  std::string v = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  return v;
}

std::unique_ptr<sql::Statement> Db::make_statement(std::string_view sql) {
  return std::make_unique<Statement>(*this, sql, fmt::format("is{}", ++next_statement_));
}

PGresult* Db::execute(Statement& s) {
  PGconn* c = live();
  if (s.prepared_generation_ != generation_) {
    PQclear(checked(PQprepare(c, s.name_.c_str(), s.sql_.c_str(), s.nparams_, nullptr), "preparing: " + s.sql_));
    s.prepared_generation_ = generation_;
  }
  std::vector<const char*> values(static_cast<size_t>(s.nparams_));
  std::vector<int> lengths(static_cast<size_t>(s.nparams_));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = s.null_[i] ? nullptr : s.values_[i].data();
    lengths[i] = static_cast<int>(s.values_[i].size());
  }
  return checked(PQexecPrepared(c, s.name_.c_str(), s.nparams_, values.data(), lengths.data(), s.formats_.data(),
                                /*resultFormat=*/0),
                 "running: " + s.sql_);
}

// ---- statements --------------------------------------------------------------------------------

Statement::Statement(Db& db, std::string_view sql, std::string name) : db_(db), name_(std::move(name)) {
  sql_ = numbered_placeholders(sql, nparams_);
  values_.resize(static_cast<size_t>(nparams_));
  null_.assign(static_cast<size_t>(nparams_), 1);
  formats_.assign(static_cast<size_t>(nparams_), 0);
}

Statement::~Statement() {
  if (res_ != nullptr) PQclear(res_);
}

void Statement::set(int i, std::string value, bool binary) {
  IS_CHECK(i >= 1 && i <= nparams_, "parameter {} of a statement with {}: {}", i, nparams_, sql_);
  const auto at = static_cast<size_t>(i - 1);
  values_[at] = std::move(value);
  null_[at] = 0;
  formats_[at] = binary ? 1 : 0;
}

Statement& Statement::bind(int i, int64_t v) {
  set(i, std::to_string(v), false);
  return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
  // PostgreSQL's text cannot hold NUL; the store's names and texts are checked to be UTF-8 text.
  IS_REQUIRE(v.find('\0') == std::string_view::npos, kInvalidInput, "text holds a NUL byte");
  set(i, std::string(v), false);
  return *this;
}

Statement& Statement::bind_blob(int i, std::span<const uint8_t> v) {
  set(i, std::string(reinterpret_cast<const char*>(v.data()), v.size()), true);
  return *this;
}

Statement& Statement::bind_null(int i) {
  set(i, {}, false);
  null_[static_cast<size_t>(i - 1)] = 1;
  return *this;
}

bool Statement::step() {
  if (res_ == nullptr) {
    res_ = db_.execute(*this);
    row_ = -1;
  }
  return ++row_ < PQntuples(res_);
}

void Statement::reset() {
  if (res_ != nullptr) PQclear(res_);
  res_ = nullptr;
  row_ = -1;
  null_.assign(null_.size(), 1);
  formats_.assign(formats_.size(), 0);
}

bool Statement::is_null(int col) const { return PQgetisnull(res_, row_, col) != 0; }

int64_t Statement::int64(int col) const {
  if (is_null(col)) return 0;
  const char* s = PQgetvalue(res_, row_, col);
  const size_t n = static_cast<size_t>(PQgetlength(res_, row_, col));
  int64_t v = 0;
  // Booleans come as t/f in the text format.
  if (n == 1 && (s[0] == 't' || s[0] == 'f')) return s[0] == 't' ? 1 : 0;
  const auto [end, ec] = std::from_chars(s, s + n, v);
  IS_CHECK(ec == std::errc() && end == s + n, "column {} is not an integer: '{}'", col, std::string(s, n));
  return v;
}

std::string Statement::text(int col) const {
  if (is_null(col)) return {};
  return std::string(PQgetvalue(res_, row_, col), static_cast<size_t>(PQgetlength(res_, row_, col)));
}

// bytea in the text format is "\x" and two hex digits a byte.
std::span<const uint8_t> Statement::blob(int col) const {
  blob_.clear();
  if (is_null(col)) return {};
  const char* s = PQgetvalue(res_, row_, col);
  const size_t n = static_cast<size_t>(PQgetlength(res_, row_, col));
  IS_CHECK(n >= 2 && s[0] == '\\' && s[1] == 'x' && n % 2 == 0, "column {} is not bytea in hex", col);
  blob_.resize((n - 2) / 2);
  for (size_t i = 0; i < blob_.size(); ++i) {
    const int hi = hex_digit(s[2 + 2 * i]), lo = hex_digit(s[3 + 2 * i]);
    IS_CHECK(hi >= 0 && lo >= 0, "column {}: bad hex in bytea", col);
    blob_[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return blob_;
}

}  // namespace inferscale::postgres
