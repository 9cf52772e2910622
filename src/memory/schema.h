// The fact store's SQLite schema and its migrations. The database records the version it is at in
// `schema_version`; opening runs every later migration in one transaction. A database written by
// a newer build (a version above kSchemaVersion) is refused, never silently downgraded.
#pragma once
#include <cstdint>

namespace inferscale {
namespace sqlite {
class Db;
}

inline constexpr int64_t kSchemaVersion = 5;

// The version recorded in the database; 0 for a new, empty one.
int64_t schema_version(sqlite::Db& db);
// Brings the database to version `to` (kSchemaVersion; tests build older databases with a lower
// one). Throws kUnsupported when it is newer than this build.
void migrate_schema(sqlite::Db& db, int64_t to = kSchemaVersion);

}  // namespace inferscale
