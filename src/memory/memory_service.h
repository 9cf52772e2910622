// The memory service: the read path (retrieve -> compose -> make sure every fact's KV is in the
// pool -> the injected span) and the write path's KV side (encode facts, KV files). It runs on the
// engine thread, which owns the backend, the cache's block manager and the pool; the FactStore it
// reads is thread-safe and may be written from any thread (deletes and updates reach the pool
// through a queue drained by sync()).
//
//   prompt source (chat messages or a completion's prompt: prompt_layout.h) + memory request
//     -> retrieve top-k (Retriever over the user's facts; a text query or a client query vector)
//     -> order (rank: best-ranked fact last; time: chronological)
//     -> render each fact "[{date}] {speaker}: {text}\n" and tokenize it alone (no BOS)
//     -> inject mode: pool entry per fact, keyed (id, version, w, hash of the window's tokens):
//        found, read from its KV file, or encoded now ([w preceding turns][fact], pre-RoPE K and V
//        captured into the pool)
//     -> [prefix ... header][f_k ... f_1][footer ... question] (prompt_layout.h), span = the facts' range
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "engine/memory_connector.h"
#include "engine/request.h"
#include "memory/request_memory.h"
#include "tokenizer/chat_render.h"
#include "memory/compose/compose.h"
#include "memory/compose/fact_texts.h"
#include "memory/kv/added_facts.h"
#include "memory/kv/fact_encoder.h"
#include "memory/store/fact_store.h"
#include "memory/kv/kv_file.h"
#include "memory/kv/kv_pool.h"
#include "memory/compose/prompt_layout.h"
#include "memory/retrieval/retriever.h"
#include "model/model.h"

namespace inferscale {

class Progress;

struct MemoryOptions {
  std::string fact_template = "[{date}] {speaker}: {text}";
  // The memory block around the facts (prompt_layout.h's FactsBlock::for_user): it tells the
  // model whose memories these are and to answer from them; "{user}" is the user's name
  // (memory.name, else the user id). The same tokens in modes inject and text.
  // The wording is measured (docs/QUALITY.md, personal facts): "in a few words" is what keeps a
  // small model from answering as a chatbot with no memory.
  std::string header = "You are talking with {user}. What you remember about {user} (most relevant last):\n";
  std::string footer = "Use these memories to answer {user}'s question in a few words.";
  int32_t default_k = 10;
  int32_t default_window = 5;
  int32_t default_recompute = 0;          // MemoryRequest::recompute when the request gives none
  int32_t default_recompute_last = 0;     // MemoryRequest::recompute_last when the request gives none
  double default_recompute_attention = 0;  // MemoryRequest::recompute_attention when the request gives none
  std::filesystem::path kv_dir;           // KV files; empty = keep KV in the pool only
  int32_t encode_batch_tokens = 2048;
  bool sink = false;                      // encode each fact after a BOS token (its KV discarded)
  // Entries each of the service's two token caches (a fact's rendered tokens, its window's) may
  // hold; one that reaches it is emptied and refilled on demand. Deleted facts leave both.
  size_t max_cached_facts = size_t{1} << 18;
};

class MemoryService final : public MemoryConnector, private FactStoreListener {
 public:
  MemoryService(FactStore& store, const Retriever& retriever, const Model& model, Backend& backend,
                BlockManager& cache_blocks, MemoryOptions opts = {});
  ~MemoryService() override;

  // Builds the prompt of a request with memory, laid out by frame_prompt (prompt_layout.h): a
  // chat's block of facts at the end of its system message, a completion's before its prompt;
  // with no fact placed (mode off, k = 0, nothing retrieved) exactly the plain prompt. Mode inject
  // falls back to text (MemoryPrompt::fallback) when the facts' KV cannot be made resident for
  // lack of room: the request is served, only slower. Throws kInvalidInput for values past the
  // MemoryRequest limits (memory/compose/compose.h).
  // `retrieved`, when given, is this request's retrieval (the connector's plan): used instead of
  // retrieving again, and moved from. `held`, when given, are pool entries the caller already
  // pinned for these facts (the plan's): they become the prompt's pins (moved from), found and
  // not pinned again.
  MemoryPrompt prepare(const MemoryRequest& req, const PromptSource& prompt, FactRetrieval* retrieved = nullptr,
                       std::vector<FactKvKey>* held = nullptr);
  // A chat: `chat` renders the conversation as a plain request with the same options would.
  MemoryPrompt prepare(const MemoryRequest& req, const std::vector<ChatMessage>& messages,
                       const ChatRenderOptions& chat = {}) {
    return prepare(req, PromptSource::of_chat(messages, chat));
  }
  // Unpins the facts of a finished request.
  void release(const MemoryPrompt& p);

  // The engine's memory connector (engine/memory_connector.h): a request's memory as prepare()
  // builds it, with the facts whose KV is nowhere encoded as capture work inside the engine's
  // steps rather than here. The first plan() retrieves (and, with nothing to encode, is ready at
  // once); the facts without KV get pool entries, pending and pinned, returned as capture
  // sequences (kEncode); it waits (kWait) until they, and facts another request is encoding, are
  // written; then the prompt is composed as prepare() composes it (kReady, RequestMemory::served;
  // its kv_ms runs from the retrieval to the last fact resident). A fact that cannot be made
  // resident for lack of room serves the request as text (MemoryPrompt::fallback), as prepare()
  // does. Every pin is the request's until request_finished().
  MemoryPlan plan(RequestMemory& m) override;
  void request_finished(RequestMemory& m) override;
  // Finished captures: their entries become servable (and their KV files are written, when kept);
  // dropped ones' entries go.
  void captures_finished(std::span<const int64_t> done, std::span<const int64_t> dropped) override;
  // The KV that plans read from KV files, written into its pool slots (then servable). If a write
  // throws, the entries not written go and the error propagates.
  bool write_loads() override;
  bool has_loads() const override { return !loads_.empty(); }

  int32_t window_of(const MemoryRequest& req) const { return req.window < 0 ? opts_.default_window : req.window; }

  // Makes sure facts' KV (window w) exists: in KV files when kv_dir is set, else in the pool.
  // Returns how many were encoded. For imports; reports to `progress` per fact when given.
  int64_t encode_facts(const std::string& tenant, const std::string& user, const std::vector<int64_t>& ids, int32_t w,
                       Progress* progress = nullptr);

  // Drops the KV of facts deleted or updated since the last call, by this process or (seen
  // through FactStore::refresh) another one (engine thread).
  void sync();

  // Background encoding, off until enable_background(). Facts added to the store after that (by
  // any thread) are queued; queued_captures() (engine thread) takes up to `max_facts` of them at
  // the default window, skipping those already in the pool or in a KV file and deleted ones, and
  // returns their encodings as capture work for Engine::add_background_capture (low priority:
  // after every request, a capped share of each step). It never evicts: it takes only what the
  // pool's free room holds (the rest is encoded on demand, as before), and with KV files, once the
  // room runs short, keeps only the files.
  std::vector<CaptureSeq> queued_captures(int32_t max_facts);
  // Queued facts, and background encodings handed out and not done (thread-safe).
  size_t num_queued() const { return added_.size(); }
  bool has_queued() const { return added_.has_queued(); }  // facts queued and not yet handed out
  // Starts queueing added facts; `on_queued` (may be empty) is called on the writer's thread after
  // facts were queued, e.g. to wake the engine thread.
  void enable_background(std::function<void()> on_queued) { added_.enable(std::move(on_queued)); }
  // Background encoding totals: facts encoded, and skipped (resident, in a file, deleted, no room).
  int64_t background_encoded() const { return added_.encoded(); }  // thread-safe
  int64_t background_skipped() const { return added_.num_skipped(); }

  // The tokens a fact is rendered to (no BOS); its KV is computed from exactly these.
  std::vector<int32_t> fact_tokens(const Fact& f) const { return texts_.tokens(f); }
  uint64_t kv_fingerprint() const { return fingerprint_; }
  // Entries in the token caches (MemoryOptions::max_cached_facts), both together (engine thread).
  size_t num_cached_tokens() const { return texts_.num_token_entries(); }
  // Facts in the cache of store reads retrievals take their hits from (engine thread).
  size_t num_cached_facts() const { return texts_.num_facts(); }
  // Their text and metadata bytes, which bound the cache with their count (engine thread).
  size_t cached_fact_bytes() const { return texts_.fact_bytes(); }
  int64_t tokens_encoded() const { return encoder_.tokens_processed(); }
  MemoryKvPool& pool() { return pool_; }
  const MemoryOptions& options() const { return opts_; }
  // The KV file of a fact (named by its store-wide key: fact.h).
  std::filesystem::path kv_path(const Fact& f) const;
  // The pool key of a fact's KV for window w (reads the window's turns).
  FactKvKey kv_key(const Fact& f, int32_t w) const;
  KvFileKey file_key(const FactKvKey& key) const;

 private:
  void on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                        std::span<const int64_t> keys) override;
  void on_facts_added(std::span<const Fact> facts, ChangeSource source) override;
  void on_fact_updated(const Fact& fact, bool text_changed) override;
  void on_reset() override;

  // The facts prepare() places for `req` (k and the limits checked; none for mode off and k = 0).
  FactRetrieval retrieve(const MemoryRequest& req, const PromptSource& prompt);
  // Whether a fact's KV at window w is resident or in a KV file.
  bool has_kv(const Fact& f, int32_t w);
  // The first half of making facts resident: each fact's key, found entries pinned (into
  // `pinned`, which may hold this caller's pins from an earlier call), KV files read and staged
  // for write_loads() (a fresh entry, pending, pinned for the caller and once more for the load),
  // and for the facts whose KV is nowhere a fresh entry, pending, pinned for the caller and once
  // more for the encoding, with the job that fills it. On failure everything in `pinned` is
  // unpinned.
  struct Reservation {
    std::vector<FactKvKey> keys;  // per fact
    std::vector<EncodeJob> jobs;  // facts to encode
    std::vector<FactKvKey> fresh; // [jobs] their entries' keys
    int32_t pending = 0;          // found entries still being encoded (by a capture in flight) or loaded
    int32_t staged = 0;           // facts whose KV files this call read, to be written by write_loads()
  };
  // KV read from a file, waiting for write_loads() to put it into its pool slots.
  struct StagedLoad {
    FactKvKey key;
    std::vector<int64_t> slots;
    FactKv kv;
  };
  Reservation reserve(const std::vector<Fact>& facts, int32_t w, MemoryPrompt* stats, std::vector<FactKvKey>& pinned);
  // A job's end: ok, the entry is ready (and its KV file written, when kept; throws if that
  // fails, the encoding's pin then kept for the caller's cleanup); not ok, the entry goes. Drops
  // the encoding's pin.
  void finish_encoding(const FactKvKey& key, const EncodeJob& job, bool ok);
  // The captures filling a reservation's jobs, each an Encoding until captures_finished() makes
  // its entry ready (or drops it); `in_flight` (may be null) counts those not finished;
  // background ones count as queued until finished.
  std::vector<CaptureSeq> captures_of(Reservation& r, std::shared_ptr<int32_t> in_flight, bool background);
  struct Encoding {
    FactKvKey key;
    EncodeJob job;
    std::shared_ptr<int32_t> in_flight;  // the requesting RequestMemory's count, or null
    bool background = false;
  };
  void finish_capture(Encoding& e, bool ok);
  // The prompt composed over the request's retrieval (prepare()), into m.served; then kProbe when
  // the attention selector is asked for (memory.recompute_attention > 0), else admit().
  MemoryPlan ready(RequestMemory& m);
  // kProbe: the probe of the composed m.served (a fresh m.probe): its prompt with every fact
  // injected, its last token's attention measured.
  MemoryPlan probe(RequestMemory& m);
  // A composed request whose probe is out: kWait while it runs, the probe again if the engine
  // dropped it, else its attention choice added to the recompute mask and admit().
  MemoryPlan probed(RequestMemory& m);
  // kReady with m.served.
  MemoryPlan admit(RequestMemory& m);
  // memory.recompute_attention, the server's default where the request gives none.
  double attention_of(const MemoryRequest& r) const {
    return r.recompute_attention < 0 ? opts_.default_recompute_attention : r.recompute_attention;
  }
  // make_resident, then unpinned again: resident (until evicted) and in files when kept there.
  // Returns how many were encoded.
  int32_t encode_unpinned(const std::vector<Fact>& facts, int32_t w);
  // Pins a resident pool entry for every fact (loading or encoding the missing ones, here);
  // returns their keys in the order of `facts`. kResource when one is being encoded in the steps.
  std::vector<FactKvKey> make_resident(const std::vector<Fact>& facts, int32_t w, MemoryPrompt* stats,
                                       std::vector<FactKvKey>& pinned);
  KvFileKey file_key(const Fact& f, int32_t w) const;

  FactStore& store_;
  const Retriever& retriever_;
  const Model& model_;
  Backend& backend_;
  MemoryOptions opts_;
  MemoryKvPool pool_;
  FactEncoder encoder_;
  uint64_t fingerprint_ = 0;
  // The store reads and encodes requests repeat (fact_texts.h; engine thread only, but for the
  // listener's store_changed).
  mutable FactTexts texts_;
  mutable std::mutex stale_mu_;
  std::filesystem::path kv_file_path(int64_t fact_key) const;
  std::vector<int64_t> stale_;  // fact keys whose KV must go (listener thread -> engine thread)
  bool reset_ = false;          // every fact's KV must go (the store lost track of changes)
  // Facts added since background encoding started (listener thread -> engine thread).
  AddedFacts added_;
  // Captures handed to the engine and not yet finished, by CaptureSeq::job (engine thread).
  std::unordered_map<int64_t, Encoding> encodings_;
  int64_t next_job_ = 1;
  std::vector<StagedLoad> loads_;  // read by plans, written by write_loads() (engine thread)
};

}  // namespace inferscale
