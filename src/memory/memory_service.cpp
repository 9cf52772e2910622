#include "memory/memory_service.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>

#include "memory/compose/recompute.h"
#include "util/check.h"
#include "util/progress.h"

namespace inferscale {
namespace {

constexpr const char* kFingerprintSetting = "kv.fingerprint";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t hash_text(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }

}  // namespace

MemoryService::MemoryService(FactStore& store, const Retriever& retriever, const Model& model, Backend& backend,
                             BlockManager& cache_blocks, MemoryOptions opts)
    : store_(store),
      retriever_(retriever),
      model_(model),
      backend_(backend),
      opts_(std::move(opts)),
      pool_(backend.num_pool_blocks(), backend.block_size()),
      encoder_(backend, cache_blocks, opts_.encode_batch_tokens),
      texts_(store, model, FactTextOptions{opts_.fact_template, opts_.header, opts_.footer, opts_.sink, opts_.max_cached_facts}) {
  render_fact(opts_.fact_template, "", "", "");  // validates the template now, not on the first request
  fingerprint_ = hash_text(model_.fingerprint + "\n" + opts_.fact_template + "\n" + (opts_.sink ? "sink" : "nosink") +
                           "\nkv-format-3");  // 2: keys cover the window's tokens; 3: windows open with the block
  const std::string fp = fmt::format("{:016x}", fingerprint_);
  const auto stored = store_.get_setting(kFingerprintSetting);
  if (stored != fp) {
    // The model, tokenizer, rope config or template changed: every stored KV is stale.
    if (!opts_.kv_dir.empty() && std::filesystem::exists(opts_.kv_dir)) {
      size_t removed = 0;
      for (const auto& e : std::filesystem::directory_iterator(opts_.kv_dir))
        if (e.path().extension() == ".kv") removed += std::filesystem::remove(e.path()) ? 1 : 0;
      if (removed) spdlog::info("memory: KV fingerprint changed; {} stale KV files removed (rebuilt on demand)", removed);
    }
    store_.set_setting(kFingerprintSetting, fp);
  }
  store_.attach(this);
}

MemoryService::~MemoryService() { store_.detach(this); }

void MemoryService::on_facts_added(std::span<const Fact> facts, ChangeSource source) {
  texts_.store_changed();
  // Only this server's writes are encoded ahead: the store's contents wait for their first
  // request, and so do other replicas' writes (their users are routed there).
  if (source == ChangeSource::kThisProcess && !facts.empty()) added_.add(facts);
}

std::vector<CaptureSeq> MemoryService::queued_captures(int32_t max_facts) {
  sync();
  const std::vector<AddedFacts::Entry> batch = added_.take(max_facts);
  const int32_t w = opts_.default_window;
  std::vector<Fact> todo;
  int64_t blocks = 0;
  for (const AddedFacts::Entry& q : batch) {
    std::optional<Fact> f;
    try {
      f = store_.get(q.tenant, q.user, q.id);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotFound) throw;
    }
    if (!f) {
      added_.skipped();
      continue;
    }
    texts_.remember({&*f, 1});  // read after sync()'s drop_stale()
    if (has_kv(*f, w)) {
      added_.skipped();
      continue;
    }
    const int64_t need = pool_.blocks_for(static_cast<int32_t>(texts_.tokens(*f).size()));
    if (blocks + need > pool_.num_free_blocks()) {  // no eviction for background work
      added_.skipped();
      continue;
    }
    blocks += need;
    todo.push_back(std::move(*f));
  }
  if (todo.empty()) return {};
  std::vector<FactKvKey> pinned;
  Reservation r = reserve(todo, w, nullptr, pinned);
  for (const FactKvKey& k : pinned) pool_.unpin(k);  // held by their encodings until done
  return captures_of(r, nullptr, /*background=*/true);
}

std::vector<CaptureSeq> MemoryService::captures_of(Reservation& r, std::shared_ptr<int32_t> in_flight, bool background) {
  std::vector<CaptureSeq> out;
  for (size_t i = 0; i < r.jobs.size(); ++i) {
    CaptureSeq c;
    c.tokens = r.jobs[i].sequence();
    c.capture_slots = r.jobs[i].capture_slots();
    c.job = next_job_++;
    encodings_.emplace(c.job, Encoding{r.fresh[i], std::move(r.jobs[i]), in_flight, background});
    if (in_flight) ++*in_flight;
    if (background) added_.started();
    out.push_back(std::move(c));
  }
  return out;
}

void MemoryService::captures_finished(std::span<const int64_t> done, std::span<const int64_t> dropped) {
  for (const auto& [jobs, ok] : {std::pair{done, true}, std::pair{dropped, false}}) {
    for (int64_t job : jobs) {
      auto it = encodings_.find(job);
      if (it == encodings_.end()) continue;  // not this service's (an engine shared with tests' captures)
      Encoding e = std::move(it->second);
      encodings_.erase(it);
      finish_capture(e, ok);
    }
  }
}

// Engine thread, in the step's save phase: never throws into it.
void MemoryService::finish_capture(Encoding& e, bool ok) {
  if (e.in_flight) --*e.in_flight;
  bool kept = false;
  try {
    finish_encoding(e.key, e.job, ok);
    kept = ok;
  } catch (const std::exception& ex) {
    spdlog::warn("memory: fact {} encoded but its KV file failed: {}; not kept", e.key.fact_id, ex.what());
    finish_encoding(e.key, e.job, false);
  }
  if (e.background) added_.ended(kept);
  if (!e.background || !kept) return;
  // With files, keep the pool's room for requests once it runs short: the file holds the KV.
  if (!opts_.kv_dir.empty() && pool_.num_free_blocks() < pool_.num_blocks() / 4) pool_.erase(e.key);
}

void MemoryService::on_facts_deleted(std::string_view, std::string_view, std::span<const int64_t>,
                                     std::span<const int64_t> keys) {
  texts_.store_changed();
  std::lock_guard<std::mutex> lock(stale_mu_);
  stale_.insert(stale_.end(), keys.begin(), keys.end());
}

void MemoryService::on_fact_updated(const Fact& fact, bool) {
  texts_.store_changed();
  std::lock_guard<std::mutex> lock(stale_mu_);
  stale_.push_back(fact.key);
}

void MemoryService::on_reset() {
  texts_.store_changed();
  std::lock_guard<std::mutex> lock(stale_mu_);
  reset_ = true;
}

void MemoryService::sync() {
  std::vector<int64_t> ids;
  bool reset = false;
  {
    std::lock_guard<std::mutex> lock(stale_mu_);
    ids.swap(stale_);
    std::swap(reset, reset_);
  }
  texts_.drop_stale();  // the deletes, updates and resets below moved the epoch
  if (reset) {
    pool_.clear();  // pinned entries go when their requests end
    texts_.forget_all();
  }
  for (int64_t key : ids) {
    pool_.erase_fact(key);
    texts_.forget(key);
    if (!opts_.kv_dir.empty()) {
      std::error_code ec;
      std::filesystem::remove(kv_file_path(key), ec);
    }
  }
}

std::filesystem::path MemoryService::kv_file_path(int64_t fact_key) const {
  return opts_.kv_dir / fmt::format("{}.kv", fact_key);
}

std::filesystem::path MemoryService::kv_path(const Fact& f) const { return kv_file_path(f.key); }

FactKvKey MemoryService::kv_key(const Fact& f, int32_t w) const {
  return FactKvKey{f.key, f.version, w, texts_.window(f, w).hash};  // no copy of the tokens
}

KvFileKey MemoryService::file_key(const FactKvKey& k) const {
  const ModelConfig& c = backend_.config();
  return KvFileKey{fingerprint_, k.fact_id, k.version, k.window, static_cast<int32_t>(c.num_layers),
                   static_cast<int32_t>(c.kv_size()), k.window_hash};
}

MemoryService::Reservation MemoryService::reserve(const std::vector<Fact>& facts, int32_t w, MemoryPrompt* stats,
                                                 std::vector<FactKvKey>& pinned) {
  Reservation r;
  try {
    for (const Fact& f : facts) {
      const FactKvKey key = kv_key(f, w);
      r.keys.push_back(key);
      if (auto held = std::find(pinned.begin(), pinned.end(), key); held != pinned.end()) {  // an earlier call's
        if (const MemoryKvPool::Entry* e = pool_.find(key)) {
          if (e->pending) ++r.pending;
          continue;
        }
        // Erased while held (its encoding was dropped, the fact changed): let it go, make it again.
        pool_.unpin(key);
        pinned.erase(held);
      }
      if (const MemoryKvPool::Entry* e = pool_.find(key)) {
        if (e->pending) ++r.pending;
        pool_.pin(key);
        pinned.push_back(key);
        continue;
      }
      const auto tokens = fact_tokens(f);
      if (!opts_.kv_dir.empty()) {
        auto kv = read_kv_file(kv_path(f), file_key(key));
        // A file from another backend (f32 vs bf16 pool) is re-encoded: the pool serves what this
        // backend computes.
        if (kv && kv->num_tokens == static_cast<int32_t>(tokens.size()) && kv->pool == backend_.pool_dtype()) {
          // Read here (host I/O); written into the pool by write_loads(), a phase of its own.
          const auto& e = pool_.allocate(key, kv->num_tokens);
          pool_.pin(key);  // the caller's
          pinned.push_back(key);
          pool_.pin(key);  // the load's, until written
          pool_.set_pending(key, true);
          loads_.push_back(StagedLoad{key, pool_.slots(e), std::move(*kv)});
          ++r.staged;
          if (stats) ++stats->loaded;
          continue;
        }
      }
      const auto& e = pool_.allocate(key, static_cast<int32_t>(tokens.size()));
      pool_.pin(key);  // the caller's
      pinned.push_back(key);
      pool_.pin(key);  // the encoding's, until finish_encoding()
      pool_.set_pending(key, true);
      r.fresh.push_back(key);
      r.jobs.push_back(EncodeJob{texts_.window(f, w).tokens, tokens, pool_.slots(e)});
    }
    return r;
  } catch (...) {
    for (size_t i = 0; i < r.fresh.size(); ++i) finish_encoding(r.fresh[i], r.jobs[i], false);
    for (const FactKvKey& k : pinned) pool_.unpin(k);
    pinned.clear();
    throw;
  }
}

bool MemoryService::write_loads() {
  if (loads_.empty()) return false;
  std::vector<StagedLoad> loads = std::move(loads_);
  loads_.clear();
  size_t i = 0;
  try {
    for (; i < loads.size(); ++i) {
      backend_.write_pool(loads[i].slots, loads[i].kv.k, loads[i].kv.v);
      pool_.set_pending(loads[i].key, false);
      pool_.unpin(loads[i].key);
    }
  } catch (...) {
    for (; i < loads.size(); ++i) {  // never serve unwritten KV (freed at the last unpin)
      pool_.erase(loads[i].key);
      pool_.unpin(loads[i].key);
    }
    throw;
  }
  return true;
}

void MemoryService::finish_encoding(const FactKvKey& key, const EncodeJob& job, bool ok) {
  if (!ok) {
    pool_.erase(key);  // never serve unwritten KV (freed at the last unpin)
    pool_.unpin(key);
    return;
  }
  pool_.set_pending(key, false);
  if (!opts_.kv_dir.empty() && pool_.find(key)) {  // deleted or updated meanwhile: no file
    FactKv kv;
    kv.num_tokens = static_cast<int32_t>(job.fact.size());
    backend_.read_pool(job.pool_slots, kv.k, kv.v);
    kv.pool = backend_.pool_dtype();
    kv.dtype = kv_file_dtype(kv.pool, kv);
    write_kv_file(kv_file_path(key.fact_id), file_key(key), kv);  // on failure the encoding's pin stays
  }
  pool_.unpin(key);
}

std::vector<FactKvKey> MemoryService::make_resident(const std::vector<Fact>& facts, int32_t w, MemoryPrompt* stats,
                                                    std::vector<FactKvKey>& pinned) {
  Reservation r = reserve(facts, w, stats, pinned);
  size_t done = 0;  // jobs finished
  try {
    // Only when this call read files: a plan's ready() composes here over resident entries, and
    // must not write other plans' staged loads beside a running forward.
    if (r.staged > 0) write_loads();
    IS_REQUIRE(r.pending == 0, kResource, "{} of the facts are being encoded for a request in the engine's steps",
               r.pending);
    if (!r.jobs.empty()) encoder_.encode(r.jobs);
    for (; done < r.jobs.size(); ++done) finish_encoding(r.fresh[done], r.jobs[done], true);
    if (stats) stats->encoded += static_cast<int32_t>(r.jobs.size());
    return r.keys;
  } catch (...) {
    for (size_t i = done; i < r.jobs.size(); ++i) finish_encoding(r.fresh[i], r.jobs[i], false);
    for (size_t i = 0; i < done; ++i) pool_.erase(r.fresh[i]);
    for (const FactKvKey& k : pinned) pool_.unpin(k);
    pinned.clear();
    throw;
  }
}

FactRetrieval MemoryService::retrieve(const MemoryRequest& req, const PromptSource& prompt) {
  const int32_t k = req.k < 0 ? opts_.default_k : req.k;
  const int32_t recompute = req.recompute < 0 ? opts_.default_recompute : req.recompute;
  const int32_t recompute_last = req.recompute_last < 0 ? opts_.default_recompute_last : req.recompute_last;
  check_memory_limits(k, window_of(req), recompute, recompute_last);
  IS_REQUIRE(req.neighbours <= 1.0, kInvalidInput, "memory.neighbours must be in [0, 1], got {}", req.neighbours);
  IS_REQUIRE(req.recompute_attention <= 1.0, kInvalidInput, "memory.recompute_attention must be in [0, 1], got {}",
             req.recompute_attention);
  IS_REQUIRE(!prompt.chat || !prompt.messages.empty(), kInvalidInput, "a request with memory needs at least one message");
  std::vector<ScoredFact> hits;
  FactRetrieval r;
  if (req.mode != MemoryMode::kOff && k > 0) {
    IS_REQUIRE(!req.user.empty(), kInvalidInput, "memory.user is required");
    const auto t0 = std::chrono::steady_clock::now();
    if (!req.query_vector.empty()) {
      hits = retriever_.search_vector(req.tenant, req.user, req.query_vector, static_cast<size_t>(k));
    } else {
      const std::string query = req.query.empty() ? prompt.default_query(*model_.tokenizer) : req.query;
      SearchOptions opts;
      opts.neighbours = req.neighbours;
      hits = retriever_.search_with(req.tenant, req.user, query, static_cast<size_t>(k), opts);
    }
    r.ms = ms_since(t0);
  }
  r.hits = texts_.fetch_hits(req.tenant, req.user, hits);  // facts deleted since the search are gone
  return r;
}

bool MemoryService::has_kv(const Fact& f, int32_t w) {
  return pool_.find(kv_key(f, w)) != nullptr || (!opts_.kv_dir.empty() && std::filesystem::exists(kv_path(f)));
}

int32_t MemoryService::encode_unpinned(const std::vector<Fact>& facts, int32_t w) {
  MemoryPrompt stats;
  std::vector<FactKvKey> pinned;
  make_resident(facts, w, &stats, pinned);
  for (const FactKvKey& key : pinned) pool_.unpin(key);
  return stats.encoded;
}

MemoryPrompt MemoryService::prepare(const MemoryRequest& req, const PromptSource& prompt, FactRetrieval* retrieved,
                                    std::vector<FactKvKey>* held) {
  if (!retrieved) {
    store_.refresh();  // other processes' writes reach the retriever's indexes and the pool first
    sync();
  }
  const int32_t w = window_of(req);
  const int32_t recompute = req.recompute < 0 ? opts_.default_recompute : req.recompute;
  const int32_t recompute_last = req.recompute_last < 0 ? opts_.default_recompute_last : req.recompute_last;
  const Tokenizer& tok = *model_.tokenizer;

  MemoryPrompt out;
  if (held) {  // released with the prompt on every path below (make_resident continues from them)
    out.pins = std::move(*held);
    held->clear();
  }
  FactRetrieval fresh;
  if (!retrieved) fresh = retrieve(req, prompt);
  FactRetrieval& r = retrieved ? *retrieved : fresh;
  out.retrieve_ms = r.ms;
  for (FactHit& h : r.hits) {
    out.facts.push_back(std::move(h.fact));
    out.scores.push_back(h.score);
  }
  if (out.facts.empty()) {  // no memory at all: exactly the plain prompt
    out.tokens = frame_prompt(prompt, tok, model_.chat_template, nullptr).before;
    return out;
  }
  // Placement order: rank puts the best-ranked fact last (closest to the question).
  std::vector<size_t> order(out.facts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  if (req.order == MemoryOrder::kTime) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const Fact& fa = out.facts[a];
      const Fact& fb = out.facts[b];
      const int64_t ta = fa.timestamp_epoch.value_or(INT64_MIN), tb = fb.timestamp_epoch.value_or(INT64_MIN);
      return ta != tb ? ta < tb : fa.id < fb.id;
    });
  }
  std::vector<Fact> facts;
  std::vector<double> scores;
  for (size_t i : order) {
    facts.push_back(std::move(out.facts[i]));
    scores.push_back(out.scores[i]);
  }
  out.facts = std::move(facts);
  out.scores = std::move(scores);

  std::vector<std::vector<int32_t>> fact_toks;
  for (const Fact& f : out.facts) fact_toks.push_back(fact_tokens(f));
  const FactsBlock block = FactsBlock::for_user(opts_.header, opts_.footer, req.name.empty() ? req.user : req.name);
  const PromptFrame frame = frame_prompt(prompt, tok, model_.chat_template, &block, &texts_.frames());
  ComposedPrompt c = compose_tokens(frame.before, fact_toks, frame.after);
  out.tokens = std::move(c.tokens);
  if (req.mode != MemoryMode::kInject) return out;

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<FactKvKey> keys;  // per placed fact
  try {
    keys = make_resident(out.facts, w, &out, out.pins);  // on failure it has unpinned and freed what it took
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kResource) throw;
    out.fallback = e.what();
  }
  out.kv_ms = ms_since(t0);
  if (!out.fallback.empty()) return out;  // the same tokens, prefilled: exactly mode text
  InjectedSpan span;
  span.start = c.facts_start;
  span.end = c.facts_end;
  // The cache key names exactly which KV the span holds: user, facts and versions, window and its
  // tokens, fingerprint.
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &fingerprint_, sizeof fingerprint_);
  XXH3_64bits_update(st, &w, sizeof w);
  XXH3_64bits_update(st, &recompute, sizeof recompute);
  XXH3_64bits_update(st, &recompute_last, sizeof recompute_last);
  XXH3_64bits_update(st, req.tenant.data(), req.tenant.size() + 1);
  XXH3_64bits_update(st, req.user.data(), req.user.size() + 1);
  for (const FactKvKey& key : keys) {
    const MemoryKvPool::Entry* e = pool_.find(key);
    IS_CHECK(e != nullptr, "fact {} not resident after make_resident", key.fact_id);
    const auto s = pool_.slots(*e);
    span.pool_slots.insert(span.pool_slots.end(), s.begin(), s.end());
    const uint64_t idv[3] = {static_cast<uint64_t>(key.fact_id), static_cast<uint64_t>(key.version), key.window_hash};
    XXH3_64bits_update(st, idv, sizeof idv);
  }
  span.cache_key = XXH3_64bits_digest(st) | 1;  // never 0: 0 means "no injected KV"
  XXH3_freeState(st);
  if (recompute > 0 || recompute_last > 0) {
    // Tokens computed in the request's own context instead of injected (recompute.h); the
    // attention selector adds its own once the probe has run (memory_plan.cpp).
    span.recompute = fact_recompute_mask(c.fact_offsets, recompute, recompute_last);
    out.recomputed = span.end - span.start - span.num_injected();
  }
  IS_CHECK(static_cast<int32_t>(span.pool_slots.size()) == span.end - span.start, "span and pool slots differ");
  out.injected = std::move(span);
  return out;
}

void MemoryService::release(const MemoryPrompt& p) {
  for (const FactKvKey& k : p.pins) pool_.unpin(k);
}

int64_t MemoryService::encode_facts(const std::string& tenant, const std::string& user, const std::vector<int64_t>& ids,
                                    int32_t w, Progress* progress) {
  sync();
  int64_t encoded = 0;
  // Batches small enough to fit the pool; each batch is released before the next.
  const size_t batch = 64;
  for (size_t i = 0; i < ids.size(); i += batch) {
    std::vector<Fact> facts;
    texts_.drop_stale();  // before the reads (remember)
    for (size_t j = i; j < std::min(ids.size(), i + batch); ++j) facts.push_back(store_.get(tenant, user, ids[j]));
    texts_.remember(facts);
    encoded += encode_unpinned(facts, w);
    if (progress) progress->add(static_cast<int64_t>(facts.size()));
  }
  return encoded;
}

}  // namespace inferscale
