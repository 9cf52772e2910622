// The memory REST API (InferScale's extension): per-user facts, inside the request's tenant
// (the API key's with --api-keys, else the header X-InferScale-Tenant: tenant.h).
//
//   GET    /v1/memory/users                        users of the tenant, with their fact counts
//   GET    /v1/memory/users/{user}                 one user's fact count
//   DELETE /v1/memory/users/{user}                 every fact of the user
//   POST   /v1/memory/users/{user}/facts           {"facts": [...]} or {"conversation", "turns": [...]}
//   GET    /v1/memory/users/{user}/facts           ?after=ID&limit=N (ascending ids, keyset pages)
//   GET    /v1/memory/users/{user}/facts/{id}
//   PATCH  /v1/memory/users/{user}/facts/{id}      {"text"?, "metadata"?}
//   DELETE /v1/memory/users/{user}/facts/{id}
//   POST   /v1/memory/users/{user}/search          {"query", "k"?} through the server's Retriever
//
// Path segments are percent-decoded one by one (url_path.h), so any user name the store accepts
// is reachable. Errors are OpenAI-style (api_error.h): 400 bad JSON, fields, types or names; 404
// an unknown route, a user without facts or a fact that is not the user's; 405 a wrong method
// (with Allow); 413 a fact text over FactStore::kMaxTextBytes or too many facts in one body. Without
// memory on the server (no --data-dir) every known route answers 400 "memory is not enabled on
// this server".
//
// Threads: runs on HTTP threads, many at once. FactStore and Retriever are thread-safe, so these
// calls never go through the engine thread; the memory service learns of updates and deletes
// through the store's listener and drops stale KV on the engine thread before its next request.
#pragma once
#include <httplib.h>

#include "server/memory_provider.h"

namespace inferscale::server {

// After a write: the retriever's work for the new text (dense: embedding) runs on this HTTP thread
// rather than on the engine thread at the user's next request. The write is already durable, so a
// failure here only defers that work to the next search (logged).
void refresh_retriever(const Retriever& retriever, std::string_view tenant, std::string_view user);

class MemoryHandler {
 public:
  // `memory` may be null (memory disabled); it must outlive the handler.
  explicit MemoryHandler(MemoryProvider* memory) : memory_(memory) {}

  // Any request under /v1/memory: routes it by method and path, or throws ApiError.
  void handle(const httplib::Request& req, httplib::Response& res) const;

 private:
  MemoryProvider* memory_;
};

}  // namespace inferscale::server
