// The audit trail of every fact (table `fact_events`, schema v5): one row per ADD, UPDATE and
// DELETE with the text and metadata before and after, written by FactStore inside the change's
// own transaction, so a committed change always has its event and a rolled-back one never does.
//
// Why a table of its own and not the change log (change_log.h): the change log is a replication
// stream for the caches of other processes (rows without texts, grouped by op, pruned after a
// day); the history is read per fact, must hold the texts, and lives as long as the store, also
// after the fact is deleted (fact ids are never reused within a tenant, so a deleted fact's
// history stays unambiguous). Joining the two would either keep the change log forever (every
// process replays it) or lose history after a day.
//
//   seq       AUTOINCREMENT, the order of events
//   tenant, user, fact_id (Fact::id: per tenant)
//   event     'ADD' | 'UPDATE' | 'DELETE'
//   old_text, old_metadata   NULL for ADD
//   new_text, new_metadata   NULL for DELETE
//   at_ms     unix ms of the commit's write
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"

namespace inferscale {
namespace sql {
class Db;
}

namespace fact_history {

// Appends one event (its seq is ignored), inside the caller's write transaction.
void append(sql::Db& db, const FactEvent& e);
// The events of one fact of the tenant, oldest first (empty when it never existed).
std::vector<FactEvent> of_fact(sql::Db& db, std::string_view tenant, int64_t fact_id);

}  // namespace fact_history
}  // namespace inferscale
