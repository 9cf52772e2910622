// The server's MemoryProvider over the memory service: HTTP threads turn a request's memory
// object into a MemoryRequest; the engine thread runs retrieval, composition and injection
// (MemoryService), and the pool pins are released on the engine thread when the request ends.
#pragma once
#include <memory>

#include "memory/fact_store.h"
#include "memory/memory_service.h"
#include "memory/retriever.h"
#include "model/model.h"
#include "server/memory_provider.h"

namespace inferscale::server {

class MemoryBridge final : public MemoryProvider {
 public:
  // store, retriever and model must outlive the bridge; the bridge must outlive the AsyncEngine.
  MemoryBridge(FactStore& store, const Retriever& retriever, const Model& model, MemoryOptions opts);
  PreparedPrompt prepare(const GenerateRequest& req) override;
  FactStore& store() override { return store_; }
  const Retriever& retriever() const override { return retriever_; }

 private:
  MemoryService& service(Engine& engine);  // engine thread: made on first use, bound to its backend

  FactStore& store_;
  const Retriever& retriever_;
  const Model& model_;
  const MemoryOptions opts_;
  std::unique_ptr<MemoryService> service_;  // engine thread only
};

}  // namespace inferscale::server
