#include "memory/store/schema.h"

#include <span>

#include "memory/store/sql.h"
#include "util/check.h"

namespace inferscale {

namespace {

// Each engine's migrations, in order: each brings the schema to version `to`. Append only;
// never edit a migration that has shipped (databases in the field have already run it). A new
// version appends one migration to each list, both giving the same tables.
struct Migration {
  int64_t to;
  const char* sql;
};

constexpr Migration kSqliteMigrations[] = {
    // v1: users, facts, settings, embeddings.
    {1, R"sql(
CREATE TABLE users (
  user_key      INTEGER PRIMARY KEY,
  tenant        TEXT NOT NULL,
  user          TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  UNIQUE (tenant, user)
);
-- AUTOINCREMENT: ids are never reused after a delete (fact KV is keyed by id).
CREATE TABLE facts (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  user_key      INTEGER NOT NULL REFERENCES users(user_key),
  text          TEXT NOT NULL,
  ts_text       TEXT NOT NULL DEFAULT '',
  ts_epoch      INTEGER,
  conversation  TEXT NOT NULL DEFAULT '',
  session       TEXT NOT NULL DEFAULT '',
  turn          TEXT NOT NULL DEFAULT '',
  speaker       TEXT NOT NULL DEFAULT '',
  turn_index    INTEGER,
  metadata      TEXT NOT NULL DEFAULT '',
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  version       INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX facts_by_user ON facts (user_key, id);
-- The encoding window of a turn is a range scan of this index.
CREATE UNIQUE INDEX facts_by_turn ON facts (user_key, conversation, turn_index) WHERE turn_index IS NOT NULL;
CREATE TABLE settings (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
-- vector: dim little-endian float32 values.
CREATE TABLE embeddings (
  fact_id  INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
  embedder TEXT NOT NULL,
  dim      INTEGER NOT NULL,
  vector   BLOB NOT NULL,
  PRIMARY KEY (fact_id, embedder)
) WITHOUT ROWID;
)sql"},
    // v2: the change log (change_log.h), so a store follows the writes of other processes.
    // fact_id is the fact's id within its tenant (v3), fact_key its row (facts.id).
    {2, R"sql(
CREATE TABLE changes (
  seq      INTEGER PRIMARY KEY AUTOINCREMENT,
  op       INTEGER NOT NULL,
  tenant   TEXT NOT NULL,
  user     TEXT NOT NULL,
  fact_id  INTEGER NOT NULL,
  fact_key INTEGER NOT NULL,
  embedder TEXT NOT NULL DEFAULT '',
  at_ms    INTEGER NOT NULL
);
CREATE INDEX changes_by_time ON changes (at_ms);
)sql"},
    // v3: fact ids per tenant, so a tenant's ids count only its own facts. facts.id stays the
    // row's key, unique in the store and never reused (KV files and pool entries are keyed by
    // it; clients never see it); facts.public_id is the id clients see, numbered per tenant by
    // tenants.last_fact_id. Existing facts keep their ids as public ids, and every tenant's
    // numbering starts above the highest id given before (setting fact_ids.floor), so no id a
    // client saw comes back.
    {3, R"sql(
ALTER TABLE facts ADD COLUMN public_id INTEGER NOT NULL DEFAULT 0;
UPDATE facts SET public_id = id;
CREATE UNIQUE INDEX facts_by_public_id ON facts (user_key, public_id);
CREATE TABLE tenants (
  tenant       TEXT PRIMARY KEY,
  last_fact_id INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO settings (key, value) SELECT 'fact_ids.floor', CAST(seq AS TEXT) FROM sqlite_sequence WHERE name = 'facts';
)sql"},
    // v4: idempotency keys of writes (idempotency.h): the first answer, kept for 24 hours.
    {4, R"sql(
CREATE TABLE idempotency (
  tenant        TEXT NOT NULL,
  key           TEXT NOT NULL,
  request_hash  TEXT NOT NULL,
  answer        TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_by_time ON idempotency (created_at_ms);
)sql"},
    // v5: the history of every fact (fact_history.h), and facts found by their id within a tenant
    // without naming the user (Mem0's /memories/{id}). Facts that never changed get their ADD
    // event from what the row holds; a fact changed before v5 has no event for its past.
    {5, R"sql(
CREATE TABLE fact_events (
  seq          INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant       TEXT NOT NULL,
  user         TEXT NOT NULL,
  fact_id      INTEGER NOT NULL,
  event        TEXT NOT NULL CHECK (event IN ('ADD', 'UPDATE', 'DELETE')),
  old_text     TEXT,
  new_text     TEXT,
  old_metadata TEXT,
  new_metadata TEXT,
  at_ms        INTEGER NOT NULL
);
CREATE INDEX fact_events_by_fact ON fact_events (tenant, fact_id, seq);
CREATE INDEX facts_by_public_id_alone ON facts (public_id);
INSERT INTO fact_events (tenant, user, fact_id, event, new_text, new_metadata, at_ms)
  SELECT u.tenant, u.user, f.public_id, 'ADD', f.text, f.metadata, f.created_at_ms
  FROM facts f JOIN users u ON u.user_key = f.user_key WHERE f.version = 1 ORDER BY f.id;
)sql"},
    // v6: the change log's head (change_log.h) in a row of its own, written by the store (no longer
    // AUTOINCREMENT's counter), so both engines number changes the same way.
    {6, R"sql(
CREATE TABLE change_head (seq INTEGER NOT NULL);
INSERT INTO change_head (seq) SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'changes'), 0);
)sql"},
};

// PostgreSQL: the whole schema of v6 at once (there were no PostgreSQL stores before it). Names
// compare and sort bytewise (COLLATE "C"), as in SQLite, whatever the database's locale.
constexpr Migration kPostgresMigrations[] = {
    {6, R"sql(
CREATE TABLE users (
  user_key      BIGSERIAL PRIMARY KEY,
  tenant        TEXT COLLATE "C" NOT NULL,
  "user"        TEXT COLLATE "C" NOT NULL,
  created_at_ms BIGINT NOT NULL,
  UNIQUE (tenant, "user")
);
CREATE TABLE facts (
  id            BIGSERIAL PRIMARY KEY,
  user_key      BIGINT NOT NULL REFERENCES users(user_key),
  public_id     BIGINT NOT NULL,
  text          TEXT NOT NULL,
  ts_text       TEXT NOT NULL DEFAULT '',
  ts_epoch      BIGINT,
  conversation  TEXT COLLATE "C" NOT NULL DEFAULT '',
  session       TEXT NOT NULL DEFAULT '',
  turn          TEXT NOT NULL DEFAULT '',
  speaker       TEXT NOT NULL DEFAULT '',
  turn_index    BIGINT,
  metadata      TEXT NOT NULL DEFAULT '',
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  version       BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX facts_by_user ON facts (user_key, id);
CREATE UNIQUE INDEX facts_by_turn ON facts (user_key, conversation, turn_index) WHERE turn_index IS NOT NULL;
CREATE UNIQUE INDEX facts_by_public_id ON facts (user_key, public_id);
CREATE INDEX facts_by_public_id_alone ON facts (public_id);
CREATE TABLE settings (
  key   TEXT COLLATE "C" PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE embeddings (
  fact_id  BIGINT NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
  embedder TEXT COLLATE "C" NOT NULL,
  dim      INTEGER NOT NULL,
  vector   BYTEA NOT NULL,
  PRIMARY KEY (fact_id, embedder)
);
CREATE TABLE changes (
  seq      BIGINT PRIMARY KEY,
  op       INTEGER NOT NULL,
  tenant   TEXT NOT NULL,
  "user"   TEXT NOT NULL,
  fact_id  BIGINT NOT NULL,
  fact_key BIGINT NOT NULL,
  embedder TEXT NOT NULL DEFAULT '',
  at_ms    BIGINT NOT NULL
);
CREATE INDEX changes_by_time ON changes (at_ms);
CREATE TABLE change_head (seq BIGINT NOT NULL);
INSERT INTO change_head (seq) VALUES (0);
CREATE TABLE tenants (
  tenant       TEXT COLLATE "C" PRIMARY KEY,
  last_fact_id BIGINT NOT NULL
);
CREATE TABLE idempotency (
  tenant        TEXT COLLATE "C" NOT NULL,
  key           TEXT COLLATE "C" NOT NULL,
  request_hash  TEXT NOT NULL,
  answer        TEXT NOT NULL,
  created_at_ms BIGINT NOT NULL,
  PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_by_time ON idempotency (created_at_ms);
CREATE TABLE fact_events (
  seq          BIGSERIAL PRIMARY KEY,
  tenant       TEXT COLLATE "C" NOT NULL,
  "user"       TEXT NOT NULL,
  fact_id      BIGINT NOT NULL,
  event        TEXT NOT NULL CHECK (event IN ('ADD', 'UPDATE', 'DELETE')),
  old_text     TEXT,
  new_text     TEXT,
  old_metadata TEXT,
  new_metadata TEXT,
  at_ms        BIGINT NOT NULL
);
CREATE INDEX fact_events_by_fact ON fact_events (tenant, fact_id, seq);
)sql"},
};

}  // namespace

int64_t schema_version(sql::Db& db) {
  auto exists = db.prepare(db.dialect() == sql::Dialect::kSqlite
                               ? "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
                               : "SELECT 1 WHERE to_regclass('schema_version') IS NOT NULL");
  if (!exists->step()) return 0;
  auto q = db.prepare("SELECT version FROM schema_version");
  return q->step() ? q->int64(0) : 0;
}

void migrate_schema(sql::Db& db, int64_t to) {
  IS_CHECK(to >= 1 && to <= kSchemaVersion, "no schema version {}", to);
  const std::span<const Migration> migrations =
      db.dialect() == sql::Dialect::kSqlite ? std::span<const Migration>(kSqliteMigrations) : kPostgresMigrations;
  sql::Transaction tx(db);  // the write lock: one process migrates, the others then find it done
  db.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
  const int64_t have = schema_version(db);
  IS_REQUIRE(have <= kSchemaVersion, kUnsupported,
             "database {} has schema version {}, newer than this build supports ({}); upgrade inferscale",
             db.describe(), have, kSchemaVersion);
  if (have >= to) return;
  IS_CHECK(have > 0 || migrations.front().to <= to, "this engine's schema starts at version {}", migrations.front().to);
  for (const Migration& m : migrations)
    if (m.to > have && m.to <= to) db.exec(m.sql);
  db.exec("DELETE FROM schema_version");
  db.prepare("INSERT INTO schema_version (version) VALUES (?)")->bind(1, to).run();
  tx.commit();
}

}  // namespace inferscale
