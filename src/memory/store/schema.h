// The fact store's schema and its migrations, for each engine (SQLite, PostgreSQL). The database
// records the version it is at in `schema_version`; opening runs every later migration in one
// write transaction (with PostgreSQL, one replica migrates while the others wait for its lock). A database written by
// a newer build (a version above kSchemaVersion) is refused, never silently downgraded.
#pragma once
#include <cstdint>

namespace inferscale {
namespace sql {
class Db;
}

inline constexpr int64_t kSchemaVersion = 6;

// The version recorded in the database; 0 for a new, empty one.
int64_t schema_version(sql::Db& db);
// Brings the database to version `to` (kSchemaVersion; tests build older databases with a lower
// one). Throws kUnsupported when it is newer than this build.
void migrate_schema(sql::Db& db, int64_t to = kSchemaVersion);

}  // namespace inferscale
