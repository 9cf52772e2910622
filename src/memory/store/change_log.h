// The fact store's change log (table `changes`, schema v2): every committed write, in commit
// order, whichever process made it. Each write appends its rows in its own transaction; a
// FactStore replays the rows past the last one it has seen to its listeners (FactStore::refresh),
// so the caches of one process (retrieval indexes, the KV pool) follow the writes of another
// process that shares the data directory.
//
//   seq      committed rows are numbered 1, 2, 3, ... without holes, in commit order: append()
//            advances change_head (v6) inside the write's transaction, and writers run one at a
//            time (sql::TxKind::kWrite), so a rolled-back write gives its numbers back;
//            change_head keeps the highest ever
//   op       what happened to the fact (Op)
//   tenant, user, fact_id (Fact::id), fact_key (Fact::key), embedder (kEmbed only)
//
// Rows older than kRetentionMs are pruned. A reader that fell further behind than that sees fewer
// rows than seq numbers past its position: it has missed changes and must reload everything.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {
namespace sql {
class Db;
}

namespace change_log {

inline constexpr int64_t kRetentionMs = 24LL * 3600 * 1000;

enum class Op : int64_t { kAdd = 1, kUpdateText = 2, kUpdateMetadata = 3, kDelete = 4, kEmbed = 5 };

struct Change {
  int64_t seq = 0;
  Op op = Op::kAdd;
  std::string tenant;
  std::string user;
  int64_t fact_id = 0;
  int64_t fact_key = 0;
  std::string embedder;  // kEmbed only
};

// One row per fact (ids and keys in the same order), inside the caller's write transaction, and
// the other processes told (sql::Db::announce_change).
// Returns the last seq written (0 when `ids` is empty).
int64_t append(sql::Db& db, Op op, std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
            std::span<const int64_t> keys, std::string_view embedder = {});
// The highest seq ever written (0 for an empty log).
int64_t last_seq(sql::Db& db);
// The rows after `seq`, ascending.
std::vector<Change> since(sql::Db& db, int64_t seq);
// Deletes the rows written before `before_ms` (unix ms), inside the caller's write transaction.
void prune(sql::Db& db, int64_t before_ms);

}  // namespace change_log
}  // namespace inferscale
