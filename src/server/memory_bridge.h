// The server's MemoryProvider over the memory service: HTTP threads turn a request's memory
// object into a RequestMemory; the memory service, the engine's connector, plans it at admission
// (retrieval, a cold user's facts encoded inside its steps, composition), and the pool pins are
// released on the engine thread when the request ends.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>

#include "memory/store/fact_store.h"
#include "memory/memory_service.h"
#include "memory/retrieval/retriever.h"
#include "model/model.h"
#include "server/async_engine.h"
#include "server/memory_provider.h"

namespace inferscale::server {

class MemoryBridge final : public MemoryProvider {
 public:
  // store, retriever and model must outlive the bridge; the bridge must outlive the AsyncEngine.
  MemoryBridge(FactStore& store, const Retriever& retriever, const Model& model, MemoryOptions opts);
  PreparedPrompt prepare(const GenerateRequest& req, const PromptFit& fit) override;
  FactStore& store() override { return store_; }
  const Retriever& retriever() const override { return retriever_; }

  // Binds the memory service to an AsyncEngine's engine: `on_start` makes it, on the engine
  // thread, as the engine's memory connector, and with `background`, starts its queueing of
  // written facts before the server takes any write (a write before it was never queued), and
  // `idle_work` hands a few queued facts' encodings to the engine as background captures
  // (MemoryService::queued_captures), returning whether more are queued.
  void attach(AsyncEngineOptions& ao, bool background);
  // How a write wakes the engine thread for background work (AsyncEngine::request_idle_work);
  // set before the server takes requests.
  void set_wake(std::function<void()> wake) {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = std::move(wake);
  }
  static constexpr int32_t kBackgroundFacts = 8;  // facts per background piece
  BackgroundEncoding background() const override;
  // Engine thread only: the memory service, made on first use, bound to the engine's backend and
  // set as its memory connector.
  MemoryService& service(Engine& engine);

 private:
  FactStore& store_;
  const Retriever& retriever_;
  const Model& model_;
  const MemoryOptions opts_;
  std::unique_ptr<MemoryService> service_;  // engine thread only
  std::atomic<MemoryService*> started_{nullptr};  // service_ once made (its background counters are thread-safe)
  void wake();  // any thread
  std::mutex wake_mu_;
  std::function<void()> wake_;  // guarded by wake_mu_
};

}  // namespace inferscale::server
