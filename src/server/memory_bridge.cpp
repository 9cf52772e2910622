#include "server/memory_bridge.h"

#include <spdlog/spdlog.h>

#include "server/prompt_builder.h"

namespace inferscale::server {
namespace {

// Engine thread, before the request is accepted (memory_provider.h).
void fill_report(const MemoryPrompt& p, MemoryMode mode, MemoryReport& r) {
  r.mode = p.fallback.empty() ? mode : MemoryMode::kText;
  r.fallback = p.fallback;
  r.facts.clear();
  for (size_t i = 0; i < p.facts.size(); ++i) r.facts.push_back({p.facts[i].id, p.scores[i], p.facts[i].text});
  r.injected_tokens = p.injected ? p.injected->num_injected() : 0;
  r.recomputed_tokens = p.recomputed;
  r.encoded = p.encoded;
  r.loaded = p.loaded;
  r.retrieve_ms = p.retrieve_ms;
  r.kv_ms = p.kv_ms;
}

}  // namespace

MemoryBridge::MemoryBridge(FactStore& store, const Retriever& retriever, const Model& model, MemoryOptions opts)
    : store_(store), retriever_(retriever), model_(model), opts_(std::move(opts)) {}

MemoryService& MemoryBridge::service(Engine& engine) {
  if (!service_) {
    service_ = std::make_unique<MemoryService>(store_, retriever_, model_, engine.backend(), engine.blocks(), opts_);
    started_ = service_.get();
  }
  return *service_;
}

BackgroundEncoding MemoryBridge::background() const {
  const MemoryService* svc = started_.load();
  return svc ? BackgroundEncoding{static_cast<int64_t>(svc->num_queued()), svc->background_encoded()} : BackgroundEncoding{};
}

void MemoryBridge::wake() {
  std::function<void()> w;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    w = wake_;
  }
  if (w) w();
}

bool MemoryBridge::background_work(Engine& engine) {
  MemoryService& svc = service(engine);
  if (!background_on_) {  // from the first piece on, writes are queued and wake the engine thread
    svc.enable_background([this] { wake(); });
    background_on_ = true;
  }
  const int64_t before = svc.background_encoded();
  const bool more = svc.encode_queued(kBackgroundFacts);
  if (svc.background_encoded() > before)
    spdlog::debug("memory: {} facts encoded in the background, {} queued", svc.background_encoded() - before,
                  svc.num_queued());
  return more;
}

PreparedPrompt MemoryBridge::prepare(const GenerateRequest& req) {
  MemoryRequest mr = req.memory->resolved();
  PreparedPrompt p;
  p.report = std::make_shared<MemoryReport>();
  p.report->mode = mr.mode;
  // The same source a plain request is built from (prompt_builder.h): without facts placed, the
  // service's prompt is exactly the plain one, on both endpoints.
  // A cold user's facts are encoded first, kEncodePieceTokens at a time between engine steps (the
  // running requests decode in between); prepare() then finds them resident.
  struct Cold {
    bool planned = false;
    std::vector<Fact> facts;  // retrieved, without KV
    size_t next = 0;
    int32_t encoded = 0;
    MemoryService::Retrieval retrieval;  // the planning's, reused by prepare when nothing was missing
  };
  auto cold = std::make_shared<Cold>();
  p.warm = [this, mr, source = prompt_source(req), cold](Engine& engine) {
    MemoryService& svc = service(engine);
    if (!cold->planned) {  // the first call plans only (AsyncEngine runs it at arrival)
      cold->facts = svc.missing_facts(mr, source, &cold->retrieval);
      cold->planned = true;
    } else if (cold->next < cold->facts.size()) {
      const auto r = svc.encode_some(cold->facts, cold->next, svc.window_of(mr), kEncodePieceTokens);
      cold->next = r.next;
      cold->encoded += r.encoded;
    }
    return cold->next >= cold->facts.size();
  };
  p.prepare = [this, mr = std::move(mr), source = prompt_source(req), report = p.report, cold](Engine& engine,
                                                                                              PreparedPrompt& out) {
    MemoryService& svc = service(engine);
    // Nothing was missing: the planning's retrieval, made this turn, is this request's (facts
    // encoded in pieces since may have changed the store: those retrieve again).
    const bool fresh = cold->planned && cold->facts.empty();
    auto prepared = std::make_shared<MemoryPrompt>(svc.prepare(mr, source, fresh ? &cold->retrieval : nullptr));
    prepared->encoded += cold->encoded;  // encoded for this request, before its prepare
    out.ids = prepared->tokens;
    out.injected = prepared->injected;
    fill_report(*prepared, mr.mode, *report);
    if (!prepared->fallback.empty())
      spdlog::warn("memory: user {}: {} facts served as text instead of injected: {}", mr.user, prepared->facts.size(),
                   prepared->fallback);
    spdlog::debug("memory: user {} k={} -> {} facts ({} encoded, {} from files), {} prompt tokens, {} injected",
                  mr.user, mr.k, prepared->facts.size(), prepared->encoded, prepared->loaded, out.ids.size(),
                  out.injected ? out.injected->num_injected() : 0);
    // The pins go when the request ends; AsyncEngine drops `hold` on the engine thread.
    out.hold = std::shared_ptr<void>(prepared.get(), [&svc, prepared](void*) { svc.release(*prepared); });
  };
  return p;
}

}  // namespace inferscale::server
