// POST /v1/chat/completions and POST /v1/completions: parse -> build the prompt -> submit to the
// AsyncEngine -> answer with one JSON body or a stream of server-sent events.
//
// Runs on HTTP threads (many at once). Per request it owns the RequestStream; a client that goes
// away (ConnectionWatch, or a failed write while streaming) cancels it, which makes the engine
// thread abort the request and free its KV blocks. Errors before the first byte of the answer are
// JSON errors with their status; an error after a stream started is sent as an SSE event holding
// the same JSON error, followed by "data: [DONE]" (shutdown past --shutdown-timeout, a failed step).
//
// Tenants: the request's tenant (tenant.h) salts its prefix-cache blocks, so tenants never share
// them; the X-InferScale-Tenant header sets the memory object's tenant. Memory: a request
// with a memory object answers with a "memory" report (api_response.h), which this thread reads
// only once the engine accepted the request (memory_provider.h says why that is the sync point).
#pragma once
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "server/api_request.h"
#include "server/choice_outputs.h"
#include "server/async_engine.h"
#include "server/memory_provider.h"
#include "server/metrics.h"
#include "server/served_model.h"

namespace inferscale::server {

class GenerateHandler {
 public:
  // Everything referenced must outlive the handler; `memory` may be null (memory disabled).
  GenerateHandler(const ServedModel& model, AsyncEngine& engine, ServerMetrics& metrics, MemoryProvider* memory)
      : model_(model), engine_(engine), metrics_(metrics), memory_(memory) {}

  // Throws ApiError (or anything api_error_from maps) for errors found before answering.
  void handle(const httplib::Request& req, httplib::Response& res, ApiKind kind);

 private:
  // What submit() handed to the engine.
  struct Submitted {
    std::shared_ptr<RequestStream> stream;
    std::shared_ptr<const RequestMemory> memory;  // with memory (mode inject or text): its prompt is served.tokens
    std::vector<int32_t> prompt;                  // without: the prompt as served (echo, token ids)
    int64_t prompt_tokens = 0;                    // 0 until the engine composes a memory prompt
  };
  // Once the engine accepted the request: the response's memory report (null without a memory
  // object), and the prompt as served.
  std::shared_ptr<MemoryReport> report(const GenerateRequest& g, const Submitted& sub) const;
  GenerateRequest parse(const httplib::Request& req, ApiKind kind) const;
  // Builds the prompt (or the request memory the engine composes it from) and submits it; fits g's max_tokens.
  Submitted submit(const httplib::Request& req, GenerateRequest& g, const ChoiceOutputs& outputs);

  const ServedModel& model_;
  AsyncEngine& engine_;
  ServerMetrics& metrics_;
  MemoryProvider* memory_;
};

}  // namespace inferscale::server
