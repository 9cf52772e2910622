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

void MemoryBridge::enable_background(AsyncEngineOptions& ao) {
  // From the engine's start on, writes are queued and wake the engine thread.
  ao.on_start = [this](Engine& e) { service(e).enable_background([this] { wake(); }); };
  ao.idle_work = [this](Engine& e) {
    MemoryService& svc = service(e);
    // Queued as the engine's low-priority capture work: the next request is not held up by it.
    std::vector<CaptureSeq> captures = svc.queued_captures(kBackgroundFacts);
    if (!captures.empty())
      spdlog::debug("memory: {} facts to encode in the background, {} queued", captures.size(), svc.num_queued());
    for (CaptureSeq& c : captures) e.add_background_capture(std::move(c));
    return svc.has_queued();
  };
}

namespace {

// The engine's ticket for one served request: the memory service's (made on the engine thread,
// the first time the engine asks). When its prompt is ready: what it did goes into the request's
// MemoryReport, and the prompt must fit the context (PromptFit), which sets the request's
// max_tokens; both before the request is admitted (memory_provider.h).
class ServedTicket final : public MemoryTicket {
 public:
  ServedTicket(MemoryBridge& bridge, MemoryRequest req, PromptSource source, ApiKind kind, PromptFit fit,
               std::shared_ptr<MemoryReport> report, std::shared_ptr<std::vector<int32_t>> served)
      : bridge_(bridge), req_(std::move(req)), source_(std::move(source)), kind_(kind), fit_(fit),
        report_(std::move(report)), served_(std::move(served)) {}

  MemoryPlan resolve(Engine& engine) override {
    if (!inner_) inner_ = bridge_.service(engine).ticket(req_, source_);
    MemoryPlan plan = inner_->resolve(engine);
    if (plan.state != MemoryPlan::State::kReady) return plan;
    report(inner_->prompt());
    plan.max_tokens = fit_max_tokens(kind_, fit_.max_tokens, static_cast<int64_t>(plan.prompt.size()), fit_.limits);
    if (served_) *served_ = plan.prompt;
    return plan;
  }
  void release() override {
    if (inner_) inner_->release();
  }

 private:
  void report(const MemoryPrompt& p) {
    fill_report(p, req_.mode, *report_);
    if (!p.fallback.empty())
      spdlog::warn("memory: user {}: {} facts served as text instead of injected: {}", req_.user, p.facts.size(),
                   p.fallback);
    spdlog::debug("memory: user {} k={} -> {} facts ({} encoded, {} from files), {} prompt tokens, {} injected",
                  req_.user, req_.k, p.facts.size(), p.encoded, p.loaded, p.tokens.size(),
                  p.injected ? p.injected->num_injected() : 0);
  }

  MemoryBridge& bridge_;
  const MemoryRequest req_;
  const PromptSource source_;
  const ApiKind kind_;
  const PromptFit fit_;
  std::shared_ptr<MemoryReport> report_;
  std::shared_ptr<std::vector<int32_t>> served_;
  std::shared_ptr<MemoryService::Ticket> inner_;
};

}  // namespace

PreparedPrompt MemoryBridge::prepare(const GenerateRequest& req, const PromptFit& fit) {
  PreparedPrompt p;
  p.report = std::make_shared<MemoryReport>();
  MemoryRequest mr = req.memory->resolved();
  p.report->mode = mr.mode;
  if (fit.keep_prompt) p.served = std::make_shared<std::vector<int32_t>>();
  // The same source a plain request is built from (prompt_builder.h): without facts placed, the
  // service's prompt is exactly the plain one, on both endpoints.
  p.memory = std::make_shared<ServedTicket>(*this, std::move(mr), prompt_source(req), req.kind, fit, p.report, p.served);
  return p;
}

}  // namespace inferscale::server
