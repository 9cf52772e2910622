// Mem0-compatible memory routes, so Mem0 clients change only their base URL. Both surfaces
// translate to the same FactStore and Retriever calls as the memory REST API (memory_handler.h),
// inside the request's tenant (tenant.h); the shapes and the entity mapping are in mem0_shapes.h.
//
// Mem0's self-hosted server (mem0 repo, server/main.py):
//   POST   /memories                 {"messages", "user_id"|"agent_id"|"run_id", "metadata"?, "infer"?}
//   GET    /memories?user_id=...     {"results": [...]}  (&limit=N, 1..1000, default 100)
//   DELETE /memories?user_id=...     every memory of the scope
//   GET|PUT|DELETE /memories/{id}    PUT: {"text" (or "data"), "metadata"?}
//   GET    /memories/{id}/history    the fact's events, oldest first
//   POST   /search                   {"query", entity ids or "filters", "top_k" (or "limit"), "threshold"?}
// Mem0's platform API, as the mem0ai MemoryClient calls it (paths end in '/'; either form is served):
//   GET    /v1/ping/                 {"status": "ok", "org_id", "project_id": the tenant, "user_email": null}
//   POST   /v3/memories/add/, /v1/memories/       the add above
//   POST   /v3/memories/search/, /v2/memories/search/, /v1/memories/search/   the search above
//   POST   /v3/memories/, /v2/memories/           get all: {"filters"}, ?page=&page_size= (or in the
//                                                 body) -> {"count", "next", "previous", "results"}
//   GET|PUT|DELETE /v1/memories/{id}/, GET /v1/memories/{id}/history/
//   DELETE /v1/memories/?user_id=...              every memory of the scope
//
// An add stores the messages as conversation turns (conversation "chat", the one a chat's
// memory.store writes); `infer` does no LLM extraction (mem0_turns). Errors are the server's
// OpenAI-style body plus Mem0's (FastAPI's) "detail" string, which the mem0ai client reports.
// Fields that only steer Mem0's LLM extraction or its platform's bookkeeping are accepted and
// ignored (custom_instructions, custom_categories, includes, excludes, prompt, version,
// output_format, async_mode, rerank, keyword_search, fields, ...); ones whose meaning this server
// cannot keep are a 400 (expiration_date, memory_type, app_id, enable_graph: true; timestamp on
// an update; categories, start_date and end_date on a search or get-all).
#pragma once
#include <httplib.h>

#include <array>

#include "server/memory_provider.h"

namespace inferscale::server {

class Mem0Handler {
 public:
  // The path patterns (httplib regexes) to route here, with every method.
  static constexpr std::array<const char*, 6> kPathPatterns = {
      R"(/memories(/[\s\S]*)?)", R"(/search/?)", R"(/v1/ping/?)",
      R"(/v1/memories(/[\s\S]*)?)", R"(/v2/memories(/[\s\S]*)?)", R"(/v3/memories(/[\s\S]*)?)"};

  // `memory` may be null (memory disabled: every route answers 400 memory_disabled).
  explicit Mem0Handler(MemoryProvider* memory) : memory_(memory) {}

  // Answers the request; never throws (errors are written with Mem0's "detail" added).
  void handle(const httplib::Request& req, httplib::Response& res) const;

 private:
  MemoryProvider* memory_;
};

}  // namespace inferscale::server
