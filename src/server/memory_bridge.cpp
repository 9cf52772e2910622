#include "server/memory_bridge.h"

#include <spdlog/spdlog.h>

#include "server/prompt_builder.h"

namespace inferscale::server {
MemoryBridge::MemoryBridge(FactStore& store, const Retriever& retriever, const Model& model, MemoryOptions opts)
    : store_(store), retriever_(retriever), model_(model), opts_(std::move(opts)) {}

MemoryService& MemoryBridge::service(Engine& engine) {
  if (!service_) {
    service_ = std::make_unique<MemoryService>(store_, retriever_, model_, engine.backend(), engine.blocks(), opts_);
    engine.set_memory(service_.get());
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

void MemoryBridge::attach(AsyncEngineOptions& ao, bool background) {
  ao.on_start = [this, background](Engine& e) {
    MemoryService& svc = service(e);
    if (background) svc.enable_background([this] { wake(); });  // writes from now on are queued and wake the engine
  };
  if (!background) return;
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

PreparedPrompt MemoryBridge::prepare(const GenerateRequest& req, const PromptFit& fit) {
  // The same source a plain request is built from (prompt_builder.h): without facts placed, the
  // service's prompt is exactly the plain one, on both endpoints.
  auto m = std::make_shared<RequestMemory>(req.memory->resolved(), prompt_source(req));
  m->fit = [kind = req.kind, fit](int64_t prompt_tokens) {
    return fit_max_tokens(kind, fit.max_tokens, prompt_tokens, fit.limits);
  };
  return PreparedPrompt{{}, std::move(m)};
}

}  // namespace inferscale::server
