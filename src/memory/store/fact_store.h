// The persistent fact store: per (tenant, user) facts, conversation turns, settings and
// embeddings in one SQL database: SQLite in a data directory (<data_dir>/memory.db, the embedded
// default) or a PostgreSQL server that replicas share (a postgresql:// URL). The same code and
// the same tests run on both (sql.h).
//
// Durability: every write that returned has been committed durably (SQLite: WAL journal with
// synchronous=FULL, fsynced, survives kill -9 or power loss; PostgreSQL: synchronous_commit on).
// Each call that writes is one transaction (all or nothing).
//
// Isolation: every query filters on the user's key; a fact id of another user (or tenant) is
// "not found", exactly like an id that does not exist.
//
// Threads: one connection behind one mutex; every method may be called from any thread.
// Listeners (fact_store_listener.h) are told of every committed change.
//
// Processes: several may open one store (one data directory, or one PostgreSQL database), and
// write to it one at a time. Every write also appends to the change log (change_log.h) in its
// transaction; refresh() replays other processes' changes to this store's listeners.
//
// A PostgreSQL server that cannot be reached makes every call throw kUnavailable (quickly; the
// next call after it reconnects); the store carries on when the server is back.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/store/fact.h"
#include "memory/store/fact_store_listener.h"
#include "memory/store/idempotency.h"

namespace inferscale {

namespace sql {
class Db;
}  // namespace sql
namespace change_log {
struct Change;
enum class Op : int64_t;
}  // namespace change_log

// The one rule for tenant, user, conversation, embedder and setting names, wherever they come
// from (REST paths, a request's memory object, the CLI): 1 to FactStore::kMaxNameBytes bytes, no
// control characters. What is wrong with `name` ("is empty", ...), or nullopt when it is valid.
std::optional<std::string> name_problem(std::string_view name);
// kInvalidInput "{what} name {problem}" unless `name` is valid.
void check_name(std::string_view what, std::string_view name);
// The rules for a fact's fields, also applied where records are parsed (fact_json.h): a date is
// empty or one parse_timestamp() reads (memory/store/timestamp.h); metadata is empty or the JSON text of
// an object. kInvalidInput starting with `where` ("fact 2: ") and naming the field.
void check_fact_date(std::string_view date, std::string_view where);
void check_fact_metadata(std::string_view metadata, std::string_view where);

struct FactStoreOptions {
  bool create_if_missing = true;  // false: kNotFound when the directory holds no store
};

class FactStore {
 public:
  static constexpr size_t kMaxTextBytes = 1 << 20;
  static constexpr size_t kMaxNameBytes = 256;  // tenant and user names
  static constexpr const char* kFileName = "memory.db";

  // Opens the SQLite store in `data_dir` (created with its parents when allowed) and migrates its schema.
  static std::unique_ptr<FactStore> open(const std::filesystem::path& data_dir, const FactStoreOptions& opts = {});
  // Opens the store in the PostgreSQL database of `url` (postgresql://USER[:PASS]@HOST[:PORT]/DB)
  // and migrates its schema; kUnavailable when the server cannot be reached, kNotFound when the
  // database holds no store and !create_if_missing.
  static std::unique_ptr<FactStore> open_postgres(const std::string& url, const FactStoreOptions& opts = {});
  // open_postgres() for a postgresql:// or postgres:// URL, else open() of a data directory.
  static std::unique_ptr<FactStore> open_at(const std::string& where, const FactStoreOptions& opts = {});
  ~FactStore();
  FactStore(const FactStore&) = delete;
  FactStore& operator=(const FactStore&) = delete;

  // ---- facts -------------------------------------------------------------------------------
  // Writes (add_facts, add_turns, update, remove, remove_user) may carry an Idempotency
  // (idempotency.h): the key's first answer is stored in the write's transaction; when the key
  // names an earlier write of the same request, nothing is written, idem->replayed is set, the
  // return value is empty and idem->answer is the first answer. The same key with another request
  // throws IdempotencyKeyReused.
  //
  // Adds facts in one transaction; returns their ids in input order. Client vectors
  // (NewFact::vector) are stored under kClientEmbedder in the same transaction.
  std::vector<int64_t> add_facts(std::string_view tenant, std::string_view user, std::span<const NewFact> facts,
                                 Idempotency* idem = nullptr);
  int64_t add_fact(std::string_view tenant, std::string_view user, const NewFact& fact);
  // Appends conversation turns (in order) to `conversation`: each becomes a fact with
  // source.conversation = conversation and the next turn_index of that conversation.
  std::vector<int64_t> add_turns(std::string_view tenant, std::string_view user, std::string_view conversation,
                                 std::span<const NewFact> turns, Idempotency* idem = nullptr);

  // kNotFound when the id is unknown or belongs to another user.
  Fact get(std::string_view tenant, std::string_view user, int64_t id) const;
  // The facts in the order of `ids`; kNotFound naming the first id that is not the user's.
  std::vector<Fact> get_many(std::string_view tenant, std::string_view user, std::span<const int64_t> ids) const;
  // The same, skipping the ids that are not (or no longer) the user's facts.
  std::vector<Fact> get_existing(std::string_view tenant, std::string_view user, std::span<const int64_t> ids) const;
  // Ascending by id, paginated (see ListOptions).
  std::vector<Fact> list(std::string_view tenant, std::string_view user, const ListOptions& opts = {}) const;
  // The encoding window of a fact, oldest first, empty for w = 0: for a turn, the (at most) w
  // turns of the same conversation that precede it; for a free-standing fact (no turn index),
  // the (at most) w free-standing facts the user wrote before it. Either way the fact's KV is
  // encoded after text like what it is served beside: other memories of the same user.
  std::vector<Fact> window(std::string_view tenant, std::string_view user, int64_t fact_id, size_t w) const;
  // The same for a fact already read: no lookup of the fact itself, so it also answers after the
  // fact was deleted meanwhile (a request composed from it is served as it was retrieved).
  std::vector<Fact> window(const Fact& fact, size_t w) const;
  size_t count(std::string_view tenant, std::string_view user) const;
  // Every user that has a fact, ordered by (tenant, user).
  std::vector<UserRef> users() const;

  // Replaces the fields given; bumps the version when anything changed and returns the fact.
  // A text change drops the fact's embeddings (they were computed from the old text).
  Fact update(std::string_view tenant, std::string_view user, int64_t id, const FactUpdate& update,
              Idempotency* idem = nullptr);
  // kNotFound when the id is not the user's.
  void remove(std::string_view tenant, std::string_view user, int64_t id, Idempotency* idem = nullptr);
  // Deletes every fact of the user; returns how many.
  size_t remove_user(std::string_view tenant, std::string_view user, Idempotency* idem = nullptr);
  // Deletes those of `ids` that are the user's facts, in one transaction; returns how many.
  size_t remove_existing(std::string_view tenant, std::string_view user, std::span<const int64_t> ids);

  // ---- by id alone, and history ----------------------------------------------------------------
  // The tenant's fact `id`, whichever user holds it (ids are per tenant: at most one does).
  std::optional<Fact> find(std::string_view tenant, int64_t id) const;
  // Every event of the tenant's fact `id` (memory/store/fact_history.h), oldest first; a deleted fact
  // keeps its history, an id never given has none. Every write above records its events in its
  // own transaction.
  std::vector<FactEvent> history(std::string_view tenant, int64_t id) const;

  // ---- settings (global key/value: KV fingerprint, encoding window, ...) -----------------------
  std::optional<std::string> get_setting(std::string_view key) const;
  void set_setting(std::string_view key, std::string_view value);

  // ---- embeddings (float32 vectors per (fact, embedder)) -------------------------------------
  // Stores (or replaces) vectors; all rows of one user and embedder share one dimension.
  // Rows with a fact_version whose fact has another version now, or is gone, are skipped (it
  // changed while the embedder ran); a row without one (0) for a fact that is not the user's is
  // kNotFound. Returns the number written.
  size_t put_embeddings(std::string_view tenant, std::string_view user, std::string_view embedder,
                        std::span<const EmbeddingRow> rows);
  std::optional<std::vector<float>> get_embedding(std::string_view tenant, std::string_view user, int64_t id,
                                                  std::string_view embedder) const;
  // Every vector of the user for `embedder`, ascending by fact id.
  EmbeddingMatrix embeddings(std::string_view tenant, std::string_view user, std::string_view embedder) const;
  // Facts of the user without a vector for `embedder`, ascending by id, at most `limit`.
  std::vector<Fact> facts_missing_embedding(std::string_view tenant, std::string_view user, std::string_view embedder,
                                            size_t limit) const;

  // ---- listeners -----------------------------------------------------------------------------
  // Replays the current contents to `listener`, then sends it every change until detach().
  // The listener must outlive its attachment.
  void attach(FactStoreListener* listener);
  void detach(FactStoreListener* listener);
  // Catches up with the changes other processes committed: replays them to the listeners.
  // Cheap when there are none (SQLite: one PRAGMA data_version; PostgreSQL: a doorbell flag, and
  // one query a second). Call it before serving from a cache of the store, such as before each
  // retrieval. Returns whether anything was replayed; kUnavailable while the store is unreachable.
  bool refresh();

  // What the store is, for messages: the database file, or the server and database (no password).
  const std::string& describe() const;
  // A durability setting of the engine on the store's connection (diagnostics and tests): a
  // PRAGMA for SQLite ("synchronous" -> "2"), SHOW for PostgreSQL ("synchronous_commit" -> "on").
  std::string engine_setting(std::string_view name) const;

 private:
  explicit FactStore(std::unique_ptr<sql::Db> db);
  static std::unique_ptr<FactStore> open_db(std::unique_ptr<sql::Db> db);
  std::vector<int64_t> add_facts_impl(std::string_view tenant, std::string_view user, std::span<const NewFact> facts,
                                      std::optional<std::string_view> conversation, Idempotency* idem);
  // Inside a write transaction: whether `idem` (may be null) names an earlier write of this
  // request (its answer is then in idem->answer); throws IdempotencyKeyReused for another request.
  bool replayed_locked(std::string_view tenant, Idempotency* idem);
  // Inside a write transaction: the history event of what the write did to `f` (as it is now;
  // for a delete, as it was).
  void record_locked(const Fact& f, FactEventKind kind, std::optional<std::string> old_text,
                     std::optional<std::string> old_metadata, int64_t at_ms);
  // Inside the write's transaction, after it: renders and stores its answer under the key.
  void remember_locked(std::string_view tenant, Idempotency* idem, const WriteResult& result);
  // Helpers below run with mu_ held.
  std::optional<int64_t> find_user_key(std::string_view tenant, std::string_view user) const;
  int64_t ensure_user_key(std::string_view tenant, std::string_view user);
  std::optional<Fact> find_fact(int64_t user_key, std::string_view tenant, std::string_view user, int64_t id) const;
  // The user's facts among `ids`, in ids' order (repeats kept, missing ones skipped), from one
  // query (a retrieval's k facts: one statement step a row instead of a statement a fact).
  std::vector<Fact> find_facts(int64_t user_key, std::string_view tenant, std::string_view user,
                               std::span<const int64_t> ids) const;
  // kNotFound unless the user exists and owns the fact.
  Fact require_fact(std::optional<int64_t> user_key, std::string_view tenant, std::string_view user, int64_t id) const;
  std::vector<Fact> list_locked(int64_t user_key, std::string_view tenant, std::string_view user,
                                const ListOptions& opts) const;
  EmbeddingMatrix embeddings_locked(int64_t user_key, std::string_view embedder) const;
  void insert_locked(int64_t user_key, std::string_view tenant, std::string_view user, std::span<const NewFact> facts,
                     std::optional<std::string_view> conversation, std::vector<Fact>& added);
  void write_embeddings_locked(int64_t user_key, std::string_view tenant, std::string_view user,
                               std::string_view embedder, std::span<const EmbeddingRow> rows, EmbeddingMatrix& put,
                               std::vector<int64_t>& put_keys);
  template <class F>
  void notify(F&& f);
  // Replays the change log past seen_seq_ to the listeners, in one read transaction (mu_ held;
  // after every write commits, and from refresh()). `added` (may be null) is a listener that
  // receives the store's whole contents from the same snapshot instead (attach).
  // Returns the number of log rows replayed.
  size_t catch_up_locked(FactStoreListener* added = nullptr);
  void replay_contents_locked(FactStoreListener& listener);
  void replay_run_locked(std::span<const change_log::Change> run);  // rows of one op, user and embedder
  void after_write_locked();   // catch_up_locked(), which must not fail a committed write
  // change_log::append inside a write transaction, noting the rows as this store's own.
  void log_locked(change_log::Op op, std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                  std::span<const int64_t> keys, std::string_view embedder = {});
  // Called inside every write transaction: prunes old change-log rows now and then.
  void prune_locked();

  mutable std::mutex mu_;
  std::unique_ptr<sql::Db> db_;
  std::vector<FactStoreListener*> listeners_;
  int64_t seen_seq_ = 0;       // the last change-log row the listeners were told of
  int64_t pruned_at_ms_ = 0;
  // The change-log rows of this store's write being committed ([first, last]; empty when first >
  // last), and of the write whose catch-up runs: those replay as ChangeSource::kThisProcess.
  std::pair<int64_t, int64_t> pending_own_{1, 0};
  int64_t own_first_ = 1, own_last_ = 0;
  bool catch_up_pending_ = false;  // a catch-up failed (after a write, or the store unreachable): refresh() retries it
};

}  // namespace inferscale
