#include "memory/store/fact_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "memory/store/change_log.h"
#include "memory/store/fact_history.h"
#include "memory/store/idempotency.h"
#include "memory/store/postgres.h"
#include "memory/store/schema.h"
#include "memory/store/sql.h"
#include "memory/store/sqlite.h"
#include "memory/store/timestamp.h"
#include "util/check.h"

namespace inferscale {

static_assert(std::endian::native == std::endian::little, "embedding blobs are stored little-endian");

namespace {

// Column list shared by every query that reads whole facts; read_fact() follows this order.
// f.public_id is Fact::id (per tenant), f.id is Fact::key (per store).
#define IS_FACT_COLUMNS                                                                                        \
  "f.public_id, f.text, f.ts_text, f.ts_epoch, f.conversation, f.session, f.turn, f.speaker, f.turn_index, " \
  "f.metadata, f.created_at_ms, f.updated_at_ms, f.version, f.id"

Fact read_fact(const sql::Statement& s, std::string_view tenant, std::string_view user) {
  Fact f;
  f.id = s.int64(0);
  f.tenant = tenant;
  f.user = user;
  f.text = s.text(1);
  f.timestamp = s.text(2);
  f.timestamp_epoch = s.opt_int64(3);
  f.source = FactSource{s.text(4), s.text(5), s.text(6), s.text(7)};
  f.turn_index = s.opt_int64(8);
  f.metadata = s.text(9);
  f.created_at_ms = s.int64(10);
  f.updated_at_ms = s.int64(11);
  f.version = s.int64(12);
  f.key = s.int64(13);
  return f;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void check_user(std::string_view tenant, std::string_view user) {
  check_name("tenant", tenant);
  check_name("user", user);
}

void check_text(std::string_view text, std::string_view where) {
  const bool blank = std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
  IS_REQUIRE(!blank, kInvalidInput, "{}text is empty", where);
  IS_REQUIRE(text.size() <= FactStore::kMaxTextBytes, kInvalidInput, "{}text is {} bytes, more than the limit of {}",
             where, text.size(), FactStore::kMaxTextBytes);
}


void check_vector(std::span<const float> v, std::string_view where) {
  IS_REQUIRE(!v.empty(), kInvalidInput, "{}vector is empty", where);
  for (float x : v) IS_REQUIRE(std::isfinite(x), kInvalidInput, "{}vector holds a non-finite value", where);
}

std::string where_prefix(size_t i, size_t n) { return n > 1 ? fmt::format("fact {}: ", i) : std::string(); }

std::span<const uint8_t> as_bytes(std::span<const float> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

void append_blob(std::span<const uint8_t> blob, int32_t dim, std::vector<float>& out, int64_t fact_id) {
  IS_CHECK(blob.size() == static_cast<size_t>(dim) * sizeof(float), "embedding of fact {} has {} bytes for dim {}",
           fact_id, blob.size(), dim);
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(dim));
  std::memcpy(out.data() + at, blob.data(), blob.size());
}

}  // namespace

std::optional<std::string> name_problem(std::string_view name) {
  if (name.empty()) return std::string("is empty");
  if (name.size() > FactStore::kMaxNameBytes)
    return fmt::format("is {} bytes, longer than {} bytes", name.size(), FactStore::kMaxNameBytes);
  for (size_t i = 0; i < name.size(); ++i)
    if (static_cast<unsigned char>(name[i]) < 0x20)
      return fmt::format("holds a control character (byte 0x{:02x} at {})", static_cast<unsigned char>(name[i]), i);
  return std::nullopt;
}

void check_name(std::string_view what, std::string_view name) {
  if (auto problem = name_problem(name)) IS_THROW(kInvalidInput, "{} name {}", what, *problem);
}

void check_fact_metadata(std::string_view metadata, std::string_view where) {
  if (metadata.empty()) return;
  const nlohmann::json j = nlohmann::json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  IS_REQUIRE(!j.is_discarded(), kInvalidInput, "{}metadata is not valid JSON: {}", where, metadata.substr(0, 80));
  IS_REQUIRE(j.is_object(), kInvalidInput, "{}metadata must be a JSON object (or null), not {}", where,
             metadata.substr(0, 80));
}

void check_fact_date(std::string_view date, std::string_view where) {
  IS_REQUIRE(date.empty() || parse_timestamp(date).has_value(), kInvalidInput,
             "{}date '{}' is not a date this server reads: use ISO 8601 (2024-03-02, 2024-03-02T13:56:07Z), "
             "'8 May 2023', 'May 8, 2023' or LoCoMo's '1:56 pm on 8 May, 2023'",
             where, date.substr(0, 80));
}

// ---- open ------------------------------------------------------------------------------------

FactStore::FactStore(std::unique_ptr<sql::Db> db) : db_(std::move(db)) {}
FactStore::~FactStore() = default;

std::unique_ptr<FactStore> FactStore::open(const std::filesystem::path& data_dir, const FactStoreOptions& opts) {
  const std::filesystem::path file = data_dir / kFileName;
  std::error_code ec;
  if (opts.create_if_missing) {
    std::filesystem::create_directories(data_dir, ec);
    IS_REQUIRE(!ec, kInvalidInput, "cannot create data directory {}: {}", data_dir.string(), ec.message());
  } else {
    IS_REQUIRE(std::filesystem::exists(file, ec), kNotFound, "no memory store in {} ({} is missing)",
               data_dir.string(), kFileName);
  }
  auto db = std::make_unique<sqlite::Db>(file.string(), opts.create_if_missing);
  db->exec("PRAGMA busy_timeout = 5000");
  // WAL + FULL: a commit returns only after the WAL is fsynced (survives power loss, not only
  // kill -9); readers never block the writer.
  db->exec("PRAGMA journal_mode = WAL");
  db->exec("PRAGMA synchronous = FULL");
  db->exec("PRAGMA foreign_keys = ON");
  IS_REQUIRE(db->engine_setting("journal_mode") == "wal", kResource, "database {}: cannot enable WAL journal mode",
             file.string());
  return open_db(std::move(db));
}

std::unique_ptr<FactStore> FactStore::open_postgres(const std::string& url, const FactStoreOptions& opts) {
  auto db = std::make_unique<postgres::Db>(url);
  IS_REQUIRE(opts.create_if_missing || schema_version(*db) > 0, kNotFound, "no memory store in {} (no schema_version table)",
             db->describe());
  return open_db(std::move(db));
}

std::unique_ptr<FactStore> FactStore::open_at(const std::string& where, const FactStoreOptions& opts) {
  return postgres::is_url(where) ? open_postgres(where, opts) : open(where, opts);
}

std::unique_ptr<FactStore> FactStore::open_db(std::unique_ptr<sql::Db> db) {
  migrate_schema(*db);
  std::unique_ptr<FactStore> store(new FactStore(std::move(db)));
  store->seen_seq_ = change_log::last_seq(*store->db_);  // listeners get the contents at attach, not the history
  store->db_->others_may_have_written();                  // the contents just read are the baseline
  return store;
}

const std::string& FactStore::describe() const { return db_->describe(); }

std::string FactStore::engine_setting(std::string_view name) const {
  IS_REQUIRE(!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c == '_' || std::islower(c); }),
             kInvalidInput, "bad setting name '{}'", name);
  std::lock_guard lock(mu_);
  return db_->engine_setting(name);
}

// ---- helpers (mu_ held) ----------------------------------------------------------------------

std::optional<int64_t> FactStore::find_user_key(std::string_view tenant, std::string_view user) const {
  auto s = db_->prepare("SELECT user_key FROM users WHERE tenant = ? AND \"user\" = ?");
  s->bind(1, tenant).bind(2, user);
  if (!s->step()) return std::nullopt;
  return s->int64(0);
}

int64_t FactStore::ensure_user_key(std::string_view tenant, std::string_view user) {
  if (auto key = find_user_key(tenant, user)) return *key;
  auto s = db_->prepare("INSERT INTO users (tenant, \"user\", created_at_ms) VALUES (?, ?, ?) RETURNING user_key");
  s->bind(1, tenant).bind(2, user).bind(3, now_ms());
  IS_CHECK(s->step(), "no user_key from INSERT");
  return s->int64(0);
}

std::optional<Fact> FactStore::find_fact(int64_t user_key, std::string_view tenant, std::string_view user,
                                         int64_t id) const {
  auto s = db_->prepare("SELECT " IS_FACT_COLUMNS " FROM facts f WHERE f.public_id = ? AND f.user_key = ?");
  s->bind(1, id).bind(2, user_key);
  if (!s->step()) return std::nullopt;
  return read_fact(*s, tenant, user);
}

std::vector<Fact> FactStore::find_facts(int64_t user_key, std::string_view tenant, std::string_view user,
                                        std::span<const int64_t> ids) const {
  std::vector<Fact> out;
  if (ids.empty()) return out;
  // The ids as literals (integers we format, never client text), in statements cached by count:
  // one text per list length up to kMaxListed ids, so the statement cache stays small.
  constexpr size_t kMaxListed = 64;
  std::unordered_map<int64_t, Fact> found;
  for (size_t at = 0; at < ids.size(); at += kMaxListed) {
    const size_t n = std::min(kMaxListed, ids.size() - at);
    std::string sql = "SELECT " IS_FACT_COLUMNS " FROM facts f WHERE f.user_key = ? AND f.public_id IN (?";
    for (size_t i = 1; i < n; ++i) sql += ", ?";
    sql += ")";
    auto s = db_->prepare(sql);
    s->bind(1, user_key);
    for (size_t i = 0; i < n; ++i) s->bind(static_cast<int>(i) + 2, ids[at + i]);
    while (s->step()) {
      Fact f = read_fact(*s, tenant, user);
      const int64_t id = f.id;
      found.emplace(id, std::move(f));
    }
  }
  out.reserve(found.size());
  for (int64_t id : ids)
    if (const auto it = found.find(id); it != found.end()) out.push_back(it->second);
  return out;
}

Fact FactStore::require_fact(std::optional<int64_t> user_key, std::string_view tenant, std::string_view user,
                             int64_t id) const {
  std::optional<Fact> f;
  if (user_key) f = find_fact(*user_key, tenant, user, id);
  IS_REQUIRE(f.has_value(), kNotFound, "fact {} not found for user '{}' (tenant '{}')", id, user, tenant);
  return std::move(*f);
}

std::vector<Fact> FactStore::list_locked(int64_t user_key, std::string_view tenant, std::string_view user,
                                         const ListOptions& opts) const {
  auto s = db_->prepare(
      "SELECT " IS_FACT_COLUMNS " FROM facts f WHERE f.user_key = ? AND f.public_id > ? ORDER BY f.public_id LIMIT ?");
  s->bind(1, user_key).bind(2, opts.after_id).bind(3, static_cast<int64_t>(std::min<size_t>(opts.limit, INT64_MAX)));
  std::vector<Fact> out;
  while (s->step()) out.push_back(read_fact(*s, tenant, user));
  return out;
}

EmbeddingMatrix FactStore::embeddings_locked(int64_t user_key, std::string_view embedder) const {
  auto s = db_->prepare(
      "SELECT f.public_id, e.dim, e.vector FROM embeddings e JOIN facts f ON f.id = e.fact_id "
      "WHERE f.user_key = ? AND e.embedder = ? ORDER BY f.public_id");
  s->bind(1, user_key).bind(2, embedder);
  EmbeddingMatrix m;
  while (s->step()) {
    const int64_t id = s->int64(0);
    const auto dim = static_cast<int32_t>(s->int64(1));
    IS_CHECK(m.ids.empty() || dim == m.dim, "embeddings '{}' of one user have dims {} and {}", embedder, m.dim, dim);
    m.dim = dim;
    m.ids.push_back(id);
    append_blob(s->blob(2), dim, m.data, id);
  }
  return m;
}

template <class F>
void FactStore::notify(F&& f) {
  for (FactStoreListener* l : listeners_) {
    try {
      f(*l);
    } catch (const std::exception& e) {
      spdlog::error("fact store listener failed (its index may be stale until restart): {}", e.what());
    }
  }
}

// Inserts validated facts (mu_ held, inside the caller's transaction). Fills `added` with the
// facts as stored.
void FactStore::insert_locked(int64_t user_key, std::string_view tenant, std::string_view user,
                              std::span<const NewFact> facts, std::optional<std::string_view> conversation,
                              std::vector<Fact>& added) {
  int64_t next_turn = 0;
  if (conversation) {
    auto s = db_->prepare(
        "SELECT COALESCE(MAX(turn_index), -1) + 1 FROM facts WHERE user_key = ? AND conversation = ? "
        "AND turn_index IS NOT NULL");
    s->bind(1, user_key).bind(2, *conversation);
    IS_CHECK(s->step(), "no row from MAX(turn_index)");
    next_turn = s->int64(0);
  }
  // The tenant's next ids: its counter only grows, so no id comes back after a delete.
  db_->prepare(
         "INSERT INTO tenants (tenant, last_fact_id) VALUES (?, COALESCE((SELECT CAST(value AS BIGINT) FROM settings "
         "WHERE key = 'fact_ids.floor'), 0)) ON CONFLICT (tenant) DO NOTHING")
      ->bind(1, tenant)
      .run();
  int64_t next_id = 0;
  {
    auto s = db_->prepare("SELECT last_fact_id FROM tenants WHERE tenant = ?");
    s->bind(1, tenant);
    IS_CHECK(s->step(), "no counter for tenant '{}'", tenant);
    next_id = s->int64(0) + 1;
  }
  db_->prepare("UPDATE tenants SET last_fact_id = ? WHERE tenant = ?")
      ->bind(1, next_id - 1 + static_cast<int64_t>(facts.size()))
      .bind(2, tenant)
      .run();
  const int64_t now = now_ms();
  auto ins = db_->prepare(
      "INSERT INTO facts (user_key, public_id, text, ts_text, ts_epoch, conversation, session, turn, speaker, "
      "turn_index, metadata, created_at_ms, updated_at_ms, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) "
      "RETURNING id");
  for (const NewFact& nf : facts) {
    Fact f;
    f.tenant = tenant;
    f.user = user;
    f.text = nf.text;
    f.timestamp = nf.timestamp;
    f.timestamp_epoch = parse_timestamp(nf.timestamp);
    f.source = nf.source;
    if (conversation) {
      f.source.conversation = *conversation;
      f.turn_index = next_turn++;
    }
    f.metadata = nf.metadata;
    f.created_at_ms = f.updated_at_ms = now;
    f.id = next_id++;
    ins->reset();
    ins->bind(1, user_key)
        .bind(2, f.id)
        .bind(3, f.text)
        .bind(4, f.timestamp)
        .bind(5, f.timestamp_epoch)
        .bind(6, f.source.conversation)
        .bind(7, f.source.session)
        .bind(8, f.source.turn)
        .bind(9, f.source.speaker)
        .bind(10, f.turn_index)
        .bind(11, f.metadata)
        .bind(12, now)
        .bind(13, now);
    IS_CHECK(ins->step(), "no id from INSERT INTO facts");
    f.key = ins->int64(0);
    added.push_back(std::move(f));
  }
}

// Writes vectors (mu_ held, inside the caller's transaction). Appends what was written to `put`
// and the facts' keys to `put_keys`.
void FactStore::write_embeddings_locked(int64_t user_key, std::string_view tenant, std::string_view user,
                                        std::string_view embedder, std::span<const EmbeddingRow> rows,
                                        EmbeddingMatrix& put, std::vector<int64_t>& put_keys) {
  if (rows.empty()) return;
  const auto dim = static_cast<int32_t>(rows.front().vector.size());
  auto have = db_->prepare(
      "SELECT e.dim FROM embeddings e JOIN facts f ON f.id = e.fact_id WHERE f.user_key = ? AND e.embedder = ? LIMIT 1");
  have->bind(1, user_key).bind(2, embedder);
  if (have->step()) {
    const int64_t stored = have->int64(0);
    IS_REQUIRE(stored == dim, kInvalidInput, "embedder '{}' of user '{}' holds vectors of dim {}, got dim {}",
               embedder, user, stored, dim);
  }
  have->reset();
  auto ins = db_->prepare(
      "INSERT INTO embeddings (fact_id, embedder, dim, vector) VALUES (?, ?, ?, ?) "
      "ON CONFLICT (fact_id, embedder) DO UPDATE SET dim = excluded.dim, vector = excluded.vector");
  put.dim = dim;
  for (const EmbeddingRow& r : rows) {
    std::optional<Fact> f = find_fact(user_key, tenant, user, r.fact_id);
    // Computed from that version's text: skipped when the fact changed or went meanwhile.
    if (r.fact_version != 0 && (!f || f->version != r.fact_version)) continue;
    if (!f) require_fact(user_key, tenant, user, r.fact_id);  // throws kNotFound
    ins->reset();
    ins->bind(1, f->key).bind(2, embedder).bind(3, dim).bind_blob(4, as_bytes(r.vector)).run();
    put.ids.push_back(r.fact_id);
    put_keys.push_back(f->key);
    put.data.insert(put.data.end(), r.vector.begin(), r.vector.end());
  }
}

// ---- facts -----------------------------------------------------------------------------------

std::vector<int64_t> FactStore::add_facts_impl(std::string_view tenant, std::string_view user,
                                               std::span<const NewFact> facts,
                                               std::optional<std::string_view> conversation, Idempotency* idem) {
  check_user(tenant, user);
  if (conversation) check_name("conversation", *conversation);
  std::vector<EmbeddingRow> client_rows;
  for (size_t i = 0; i < facts.size(); ++i) {
    const std::string where = where_prefix(i, facts.size());
    check_text(facts[i].text, where);
    check_fact_date(facts[i].timestamp, where);
    check_fact_metadata(facts[i].metadata, where);
    if (!facts[i].vector.empty()) {
      check_vector(facts[i].vector, where);
      IS_REQUIRE(client_rows.empty() || client_rows.front().vector.size() == facts[i].vector.size(), kInvalidInput,
                 "{}vector has dim {}, the others {}", where, facts[i].vector.size(),
                 client_rows.front().vector.size());
      client_rows.push_back(EmbeddingRow{static_cast<int64_t>(i), 0, facts[i].vector});  // fact_id set below
    }
  }
  if (facts.empty()) return {};

  std::lock_guard lock(mu_);
  std::vector<Fact> added;
  EmbeddingMatrix put;
  std::vector<int64_t> ids, keys, put_keys;
  {
    sql::Transaction tx(*db_);
    if (replayed_locked(tenant, idem)) return {};
    prune_locked();
    const int64_t user_key = ensure_user_key(tenant, user);
    insert_locked(user_key, tenant, user, facts, conversation, added);
    for (EmbeddingRow& r : client_rows) r.fact_id = added[static_cast<size_t>(r.fact_id)].id;
    write_embeddings_locked(user_key, tenant, user, kClientEmbedder, client_rows, put, put_keys);
    for (const Fact& f : added) {
      ids.push_back(f.id);
      keys.push_back(f.key);
      record_locked(f, FactEventKind::kAdd, std::nullopt, std::nullopt, f.created_at_ms);
    }
    log_locked(change_log::Op::kAdd, tenant, user, ids, keys);
    if (!put.ids.empty())
      log_locked(change_log::Op::kEmbed, tenant, user, put.ids, put_keys, kClientEmbedder);
    remember_locked(tenant, idem, WriteResult{ids, {}, 0});
    tx.commit();
  }
  after_write_locked();
  return ids;
}

std::vector<int64_t> FactStore::add_facts(std::string_view tenant, std::string_view user,
                                          std::span<const NewFact> facts, Idempotency* idem) {
  return add_facts_impl(tenant, user, facts, std::nullopt, idem);
}

int64_t FactStore::add_fact(std::string_view tenant, std::string_view user, const NewFact& fact) {
  return add_facts(tenant, user, std::span<const NewFact>(&fact, 1)).at(0);
}

std::vector<int64_t> FactStore::add_turns(std::string_view tenant, std::string_view user,
                                          std::string_view conversation, std::span<const NewFact> turns,
                                          Idempotency* idem) {
  return add_facts_impl(tenant, user, turns, conversation, idem);
}

Fact FactStore::get(std::string_view tenant, std::string_view user, int64_t id) const {
  std::lock_guard lock(mu_);
  return require_fact(find_user_key(tenant, user), tenant, user, id);
}

std::vector<Fact> FactStore::get_many(std::string_view tenant, std::string_view user,
                                      std::span<const int64_t> ids) const {
  std::lock_guard lock(mu_);
  const auto key = find_user_key(tenant, user);
  std::vector<Fact> out = key ? find_facts(*key, tenant, user, ids) : std::vector<Fact>{};
  // In ids' order: the first id without its fact is the one to name (require_fact throws kNotFound).
  for (size_t i = 0; i < ids.size(); ++i)
    if (i >= out.size() || out[i].id != ids[i]) require_fact(key, tenant, user, ids[i]);
  return out;
}

std::vector<Fact> FactStore::get_existing(std::string_view tenant, std::string_view user,
                                          std::span<const int64_t> ids) const {
  std::lock_guard lock(mu_);
  const auto key = find_user_key(tenant, user);
  return key ? find_facts(*key, tenant, user, ids) : std::vector<Fact>{};
}

std::vector<Fact> FactStore::list(std::string_view tenant, std::string_view user, const ListOptions& opts) const {
  std::lock_guard lock(mu_);
  const auto key = find_user_key(tenant, user);
  if (!key) return {};
  return list_locked(*key, tenant, user, opts);
}

std::vector<Fact> FactStore::window(std::string_view tenant, std::string_view user, int64_t fact_id,
                                    size_t w) const {
  return window(get(tenant, user, fact_id), w);
}

std::vector<Fact> FactStore::window(const Fact& f, size_t w) const {
  if (w == 0) return {};
  std::lock_guard lock(mu_);
  const auto key = find_user_key(f.tenant, f.user);
  if (!key) return {};  // the user is gone since `f` was read
  const std::string_view tenant = f.tenant, user = f.user;
  const int64_t limit = static_cast<int64_t>(std::min<size_t>(w, INT64_MAX));
  // A turn: one range scan of facts_by_turn, newest first. A free-standing fact: the user's
  // free-standing facts written before it (facts_by_user backwards). Then reversed to reading order.
  auto s = db_->prepare(f.turn_index ? "SELECT " IS_FACT_COLUMNS
                                        " FROM facts f WHERE f.user_key = ? AND f.conversation = ? AND f.turn_index IS "
                                        "NOT NULL AND f.turn_index < ? ORDER BY f.turn_index DESC LIMIT ?"
                                      : "SELECT " IS_FACT_COLUMNS
                                        " FROM facts f WHERE f.user_key = ? AND f.turn_index IS NULL AND f.id < ? "
                                        "ORDER BY f.id DESC LIMIT ?");
  if (f.turn_index)
    s->bind(1, *key).bind(2, f.source.conversation).bind(3, *f.turn_index).bind(4, limit);
  else
    s->bind(1, *key).bind(2, f.key).bind(3, limit);
  std::vector<Fact> out;
  while (s->step()) out.push_back(read_fact(*s, tenant, user));
  std::reverse(out.begin(), out.end());
  return out;
}

size_t FactStore::count(std::string_view tenant, std::string_view user) const {
  std::lock_guard lock(mu_);
  const auto key = find_user_key(tenant, user);
  if (!key) return 0;
  auto s = db_->prepare("SELECT COUNT(*) FROM facts WHERE user_key = ?");
  s->bind(1, *key);
  IS_CHECK(s->step(), "no row from COUNT");
  return static_cast<size_t>(s->int64(0));
}

std::vector<UserRef> FactStore::users() const {
  std::lock_guard lock(mu_);
  auto s = db_->prepare(
      "SELECT u.tenant, u.\"user\" FROM users u WHERE EXISTS (SELECT 1 FROM facts f WHERE f.user_key = u.user_key) "
      "ORDER BY u.tenant, u.\"user\"");
  std::vector<UserRef> out;
  while (s->step()) out.push_back(UserRef{s->text(0), s->text(1)});
  return out;
}

Fact FactStore::update(std::string_view tenant, std::string_view user, int64_t id, const FactUpdate& up,
                       Idempotency* idem) {
  if (up.text) check_text(*up.text, "");
  if (up.metadata) check_fact_metadata(*up.metadata, "");
  std::lock_guard lock(mu_);
  Fact f;
  {
    // Read and write in one write transaction: another process may change the fact meanwhile.
    sql::Transaction tx(*db_);
    if (replayed_locked(tenant, idem)) return {};
    const auto key = find_user_key(tenant, user);
    f = require_fact(key, tenant, user, id);
    const bool text_changed = up.text && *up.text != f.text;
    const bool meta_changed = up.metadata && *up.metadata != f.metadata;
    if (!text_changed && !meta_changed) {
      if (idem) {  // nothing to change, but a retry must still get this answer
        remember_locked(tenant, idem, WriteResult{{}, f, 0});
        tx.commit();
      }
      return f;
    }
    const std::string old_text = f.text, old_metadata = f.metadata;
    if (text_changed) f.text = *up.text;
    if (meta_changed) f.metadata = *up.metadata;
    f.version += 1;
    f.updated_at_ms = now_ms();
    prune_locked();
    {
      auto u = db_->prepare("UPDATE facts SET text = ?, metadata = ?, version = ?, updated_at_ms = ? WHERE id = ? RETURNING id");
      u->bind(1, f.text).bind(2, f.metadata).bind(3, f.version).bind(4, f.updated_at_ms).bind(5, f.key);
      IS_CHECK(u->step() && !u->step(), "update of fact {} did not change exactly one row", id);
    }
    if (text_changed) db_->prepare("DELETE FROM embeddings WHERE fact_id = ?")->bind(1, f.key).run();
    record_locked(f, FactEventKind::kUpdate, old_text, old_metadata, f.updated_at_ms);
    const int64_t ids[1] = {id}, keys[1] = {f.key};
    log_locked(text_changed ? change_log::Op::kUpdateText : change_log::Op::kUpdateMetadata, tenant, user,
                       ids, keys);
    remember_locked(tenant, idem, WriteResult{{}, f, 0});
    tx.commit();
  }
  after_write_locked();
  return f;
}

void FactStore::remove(std::string_view tenant, std::string_view user, int64_t id, Idempotency* idem) {
  std::lock_guard lock(mu_);
  {
    sql::Transaction tx(*db_);
    if (replayed_locked(tenant, idem)) return;
    const Fact f = require_fact(find_user_key(tenant, user), tenant, user, id);
    prune_locked();
    db_->prepare("DELETE FROM facts WHERE id = ?")->bind(1, f.key).run();  // cascades to embeddings
    record_locked(f, FactEventKind::kDelete, f.text, f.metadata, now_ms());
    const int64_t ids[1] = {id}, keys[1] = {f.key};
    log_locked(change_log::Op::kDelete, tenant, user, ids, keys);
    remember_locked(tenant, idem, WriteResult{{}, {}, 1});
    tx.commit();
  }
  after_write_locked();
}

size_t FactStore::remove_user(std::string_view tenant, std::string_view user, Idempotency* idem) {
  std::lock_guard lock(mu_);
  std::vector<int64_t> ids, keys;
  {
    sql::Transaction tx(*db_);
    if (replayed_locked(tenant, idem)) return 0;
    const auto key = find_user_key(tenant, user);
    if (!key) return 0;  // nothing deleted: no answer to remember (a retry finds nothing either)
    const std::vector<Fact> facts = list_locked(*key, tenant, user, ListOptions{0, SIZE_MAX});
    prune_locked();
    db_->prepare("DELETE FROM facts WHERE user_key = ?")->bind(1, *key).run();  // cascades to embeddings
    db_->prepare("DELETE FROM users WHERE user_key = ?")->bind(1, *key).run();
    const int64_t at = now_ms();
    for (const Fact& f : facts) {
      ids.push_back(f.id);
      keys.push_back(f.key);
      record_locked(f, FactEventKind::kDelete, f.text, f.metadata, at);
    }
    log_locked(change_log::Op::kDelete, tenant, user, ids, keys);
    remember_locked(tenant, idem, WriteResult{{}, {}, ids.size()});
    tx.commit();
  }
  after_write_locked();
  return ids.size();
}

size_t FactStore::remove_existing(std::string_view tenant, std::string_view user, std::span<const int64_t> ids) {
  std::lock_guard lock(mu_);
  std::vector<int64_t> gone, keys;
  {
    sql::Transaction tx(*db_);
    const auto key = find_user_key(tenant, user);
    if (!key) return 0;
    prune_locked();
    const int64_t at = now_ms();
    for (int64_t id : ids) {
      const std::optional<Fact> f = find_fact(*key, tenant, user, id);
      if (!f) continue;
      db_->prepare("DELETE FROM facts WHERE id = ?")->bind(1, f->key).run();  // cascades to embeddings
      record_locked(*f, FactEventKind::kDelete, f->text, f->metadata, at);
      gone.push_back(f->id);
      keys.push_back(f->key);
    }
    if (gone.empty()) return 0;
    log_locked(change_log::Op::kDelete, tenant, user, gone, keys);
    tx.commit();
  }
  after_write_locked();
  return gone.size();
}

std::optional<Fact> FactStore::find(std::string_view tenant, int64_t id) const {
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT " IS_FACT_COLUMNS
                         ", u.\"user\" FROM facts f JOIN users u ON u.user_key = f.user_key WHERE f.public_id = ? AND "
                         "u.tenant = ?");
  s->bind(1, id).bind(2, tenant);
  if (!s->step()) return std::nullopt;
  const std::string user = s->text(14);
  return read_fact(*s, tenant, user);
}

std::vector<FactEvent> FactStore::history(std::string_view tenant, int64_t id) const {
  std::lock_guard lock(mu_);
  return fact_history::of_fact(*db_, tenant, id);
}

void FactStore::record_locked(const Fact& f, FactEventKind kind, std::optional<std::string> old_text,
                              std::optional<std::string> old_metadata, int64_t at_ms) {
  FactEvent e;
  e.tenant = f.tenant;
  e.user = f.user;
  e.fact_id = f.id;
  e.kind = kind;
  e.old_text = std::move(old_text);
  e.old_metadata = std::move(old_metadata);
  if (kind != FactEventKind::kDelete) {
    e.new_text = f.text;
    e.new_metadata = f.metadata;
  }
  e.at_ms = at_ms;
  fact_history::append(*db_, e);
}

// ---- settings --------------------------------------------------------------------------------

std::optional<std::string> FactStore::get_setting(std::string_view key) const {
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT value FROM settings WHERE key = ?");
  s->bind(1, key);
  if (!s->step()) return std::nullopt;
  return s->text(0);
}

void FactStore::set_setting(std::string_view key, std::string_view value) {
  check_name("setting", key);
  std::lock_guard lock(mu_);
  db_->prepare("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
      ->bind(1, key)
      .bind(2, value)
      .run();
}

// ---- embeddings ------------------------------------------------------------------------------

size_t FactStore::put_embeddings(std::string_view tenant, std::string_view user, std::string_view embedder,
                                 std::span<const EmbeddingRow> rows) {
  check_user(tenant, user);
  check_name("embedder", embedder);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = fmt::format("embedding of fact {}: ", rows[i].fact_id);
    check_vector(rows[i].vector, where);
    IS_REQUIRE(rows[i].vector.size() == rows[0].vector.size(), kInvalidInput, "{}dim {} differs from dim {}", where,
               rows[i].vector.size(), rows[0].vector.size());
  }
  if (rows.empty()) return 0;
  std::lock_guard lock(mu_);
  EmbeddingMatrix put;
  std::vector<int64_t> put_keys;
  {
    sql::Transaction tx(*db_);
    const auto key = find_user_key(tenant, user);
    if (!key) {
      // Versioned rows of a user deleted meanwhile are skipped like any other gone fact.
      for (const EmbeddingRow& r : rows)
        if (r.fact_version == 0) require_fact(key, tenant, user, r.fact_id);  // throws kNotFound
      return 0;
    }
    prune_locked();
    write_embeddings_locked(*key, tenant, user, embedder, rows, put, put_keys);
    if (put.ids.empty()) return 0;
    log_locked(change_log::Op::kEmbed, tenant, user, put.ids, put_keys, embedder);
    tx.commit();
  }
  after_write_locked();
  return put.ids.size();
}

std::optional<std::vector<float>> FactStore::get_embedding(std::string_view tenant, std::string_view user,
                                                           int64_t id, std::string_view embedder) const {
  std::lock_guard lock(mu_);
  const Fact f = require_fact(find_user_key(tenant, user), tenant, user, id);
  auto s = db_->prepare("SELECT dim, vector FROM embeddings WHERE fact_id = ? AND embedder = ?");
  s->bind(1, f.key).bind(2, embedder);
  if (!s->step()) return std::nullopt;
  std::vector<float> v;
  append_blob(s->blob(1), static_cast<int32_t>(s->int64(0)), v, id);
  return v;
}

EmbeddingMatrix FactStore::embeddings(std::string_view tenant, std::string_view user,
                                      std::string_view embedder) const {
  std::lock_guard lock(mu_);
  const auto key = find_user_key(tenant, user);
  if (!key) return {};
  return embeddings_locked(*key, embedder);
}

std::vector<Fact> FactStore::facts_missing_embedding(std::string_view tenant, std::string_view user,
                                                     std::string_view embedder, size_t limit) const {
  std::lock_guard lock(mu_);
  const auto key = find_user_key(tenant, user);
  if (!key) return {};
  auto s = db_->prepare("SELECT " IS_FACT_COLUMNS
                         " FROM facts f WHERE f.user_key = ? AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE "
                         "e.fact_id = f.id AND e.embedder = ?) ORDER BY f.public_id LIMIT ?");
  s->bind(1, *key).bind(2, embedder).bind(3, static_cast<int64_t>(std::min<size_t>(limit, INT64_MAX)));
  std::vector<Fact> out;
  while (s->step()) out.push_back(read_fact(*s, tenant, user));
  return out;
}

// ---- listeners -------------------------------------------------------------------------------

void FactStore::attach(FactStoreListener* listener) {
  IS_CHECK(listener != nullptr, "null listener");
  std::lock_guard lock(mu_);
  IS_CHECK(std::find(listeners_.begin(), listeners_.end(), listener) == listeners_.end(), "listener attached twice");
  catch_up_locked(listener);  // the others catch up to the snapshot the new one is filled from
  listeners_.push_back(listener);
}

void FactStore::detach(FactStoreListener* listener) {
  std::lock_guard lock(mu_);
  std::erase(listeners_, listener);
}

// ---- the change log ----------------------------------------------------------------------------

bool FactStore::refresh() {
  std::lock_guard lock(mu_);
  if (!catch_up_pending_ && !db_->others_may_have_written()) return false;
  catch_up_pending_ = true;  // until a catch-up succeeds (the store may be unreachable now)
  return catch_up_locked() > 0;
}

void FactStore::log_locked(change_log::Op op, std::string_view tenant, std::string_view user,
                           std::span<const int64_t> ids, std::span<const int64_t> keys, std::string_view embedder) {
  const int64_t last = change_log::append(*db_, op, tenant, user, ids, keys, embedder);
  if (ids.empty()) return;
  const int64_t first = last - static_cast<int64_t>(ids.size()) + 1;
  // A transaction's rows are consecutive; rows of a write that rolled back were given back, so a
  // range that does not continue is a new transaction's.
  if (pending_own_.second + 1 == first) {
    pending_own_.second = last;
  } else {
    pending_own_ = {first, last};
  }
}

void FactStore::after_write_locked() {
  // The write is durable: a failure to replay it must not fail the call. refresh() retries (and
  // then tells its rows as another process's: harmless).
  own_first_ = pending_own_.first;
  own_last_ = pending_own_.second;
  pending_own_ = {1, 0};
  try {
    catch_up_locked();
    own_first_ = 1;
    own_last_ = 0;
  } catch (const std::exception& e) {
    own_first_ = 1;
    own_last_ = 0;
    catch_up_pending_ = true;
    spdlog::error("fact store: listeners could not catch up after a write (retried at the next refresh): {}", e.what());
  }
}

void FactStore::prune_locked() {
  const int64_t now = now_ms();
  if (now - pruned_at_ms_ < 60'000) return;
  change_log::prune(*db_, now - change_log::kRetentionMs);
  idempotency::prune(*db_, now);
  pruned_at_ms_ = now;
}

// ---- idempotency ------------------------------------------------------------------------------

bool FactStore::replayed_locked(std::string_view tenant, Idempotency* idem) {
  if (!idem) return false;
  const auto rec = idempotency::find(*db_, tenant, idem->key, now_ms());
  if (!rec) return false;
  if (rec->request_hash != idem->request_hash)
    throw IdempotencyKeyReused(fmt::format("the Idempotency-Key '{}' was used within the last 24 hours for another "
                                           "request; use a new key for a new request",
                                           idem->key));
  idem->answer = rec->answer;
  idem->replayed = true;
  return true;
}

void FactStore::remember_locked(std::string_view tenant, Idempotency* idem, const WriteResult& result) {
  if (!idem) return;
  IS_CHECK(static_cast<bool>(idem->render), "an idempotent write without a render function");
  idem->answer = idem->render(result);
  idem->replayed = false;
  idempotency::put(*db_, tenant, idem->key, idempotency::Record{idem->request_hash, idem->answer}, now_ms());
}

void FactStore::replay_contents_locked(FactStoreListener& listener) {
  struct UserRow {
    int64_t key;
    std::string tenant, user;
  };
  std::vector<UserRow> users;
  {
    auto s = db_->prepare("SELECT user_key, tenant, \"user\" FROM users ORDER BY user_key");
    while (s->step()) users.push_back(UserRow{s->int64(0), s->text(1), s->text(2)});
  }
  for (const UserRow& u : users) {
    const std::vector<Fact> facts = list_locked(u.key, u.tenant, u.user, ListOptions{0, SIZE_MAX});
    if (!facts.empty()) listener.on_facts_added(facts, ChangeSource::kContents);
    std::vector<std::string> embedders;
    {
      auto s = db_->prepare(
          "SELECT DISTINCT e.embedder FROM embeddings e JOIN facts f ON f.id = e.fact_id WHERE f.user_key = ? "
          "ORDER BY e.embedder");
      s->bind(1, u.key);
      while (s->step()) embedders.push_back(s->text(0));
    }
    for (const std::string& e : embedders) {
      const EmbeddingMatrix m = embeddings_locked(u.key, e);
      listener.on_embeddings_put(u.tenant, u.user, e, m.ids, m.data, m.dim);
    }
  }
}

void FactStore::replay_run_locked(std::span<const change_log::Change> run) {
  using change_log::Op;
  const change_log::Change& c = run.front();
  std::vector<int64_t> ids, keys;
  for (const change_log::Change& r : run) {
    ids.push_back(r.fact_id);
    keys.push_back(r.fact_key);
  }
  if (c.op == Op::kDelete) {
    notify([&](FactStoreListener& l) { l.on_facts_deleted(c.tenant, c.user, ids, keys); });
    return;
  }
  // The rows as they are now: a fact deleted since is skipped (its delete follows in the log).
  const auto key = find_user_key(c.tenant, c.user);
  if (!key) return;
  if (c.op == Op::kEmbed) {
    EmbeddingMatrix m;
    auto s = db_->prepare(
        "SELECT e.dim, e.vector FROM embeddings e JOIN facts f ON f.id = e.fact_id "
        "WHERE e.fact_id = ? AND e.embedder = ? AND f.user_key = ?");
    for (size_t i = 0; i < ids.size(); ++i) {
      s->reset();
      s->bind(1, keys[i]).bind(2, c.embedder).bind(3, *key);
      if (!s->step()) continue;
      m.dim = static_cast<int32_t>(s->int64(0));
      m.ids.push_back(ids[i]);
      append_blob(s->blob(1), m.dim, m.data, ids[i]);
    }
    if (!m.ids.empty())
      notify([&](FactStoreListener& l) { l.on_embeddings_put(c.tenant, c.user, c.embedder, m.ids, m.data, m.dim); });
    return;
  }
  const std::vector<Fact> facts = find_facts(*key, c.tenant, c.user, ids);  // a run may name a fact twice
  if (facts.empty()) return;
  if (c.op == Op::kAdd) {
    const bool own = run.front().seq >= own_first_ && run.back().seq <= own_last_;
    notify([&](FactStoreListener& l) { l.on_facts_added(facts, own ? ChangeSource::kThisProcess : ChangeSource::kOtherProcess); });
  } else {
    for (const Fact& f : facts) notify([&](FactStoreListener& l) { l.on_fact_updated(f, c.op == Op::kUpdateText); });
  }
}

size_t FactStore::catch_up_locked(FactStoreListener* added) {
  sql::Transaction tx(*db_, sql::TxKind::kRead);  // the log and the rows it names, from one snapshot
  const int64_t last = change_log::last_seq(*db_);
  size_t replayed = 0;
  if (last != seen_seq_) {
    const std::vector<change_log::Change> rows = change_log::since(*db_, seen_seq_);
    if (static_cast<int64_t>(rows.size()) != last - seen_seq_) {
      // Rows this store never saw were pruned: what they did is unknown, so start over.
      spdlog::warn("fact store: {} changes by other processes were pruned before this process saw them; reloading every "
                   "fact into the caches", last - seen_seq_ - static_cast<int64_t>(rows.size()));
      notify([](FactStoreListener& l) { l.on_reset(); });
      for (FactStoreListener* l : listeners_) replay_contents_locked(*l);
    } else {
      // Consecutive rows of one kind, user, embedder and writer (this store or another) make one event.
      const auto own = [this](const change_log::Change& c) { return c.seq >= own_first_ && c.seq <= own_last_; };
      for (size_t i = 0; i < rows.size();) {
        size_t j = i + 1;
        while (j < rows.size() && rows[j].op == rows[i].op && rows[j].tenant == rows[i].tenant &&
               rows[j].user == rows[i].user && rows[j].embedder == rows[i].embedder && own(rows[j]) == own(rows[i]))
          ++j;
        replay_run_locked(std::span(rows).subspan(i, j - i));
        i = j;
      }
    }
    replayed = rows.size();
    seen_seq_ = last;
  }
  if (added) replay_contents_locked(*added);
  tx.commit();
  catch_up_pending_ = false;
  return replayed;
}

}  // namespace inferscale
