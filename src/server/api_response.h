// OpenAI-style response bodies and server-sent-event chunks for chat and text completions.
//
// Non-streaming:  {"id", "object": "chat.completion" | "text_completion", "created", "model",
//                  "choices": [{"index": 0, "message": {...} | "text", "finish_reason"}], "usage"}
// Streaming:      "data: {chunk}\n\n" ... "data: [DONE]\n\n"; chat chunks carry "delta"s (the first
//                 one the role), the last choice chunk the finish_reason, and with
//                 stream_options.include_usage a final chunk with "choices": [] and the usage
//                 (every other chunk then has "usage": null).
//
// A request that carried a `memory` object gets InferScale's extension field
//   "memory": {"mode", "facts": [{"id", "score", "text"}] (placement order), "injected_tokens",
//              "encoded", "loaded", "retrieve_ms", "kv_ms"}
// in the response body, or when streaming in the first chunk (chat: the role chunk; completion: a
// leading chunk with empty text, sent only then). With memory.store, "stored": [ids] joins it in the
// non-streamed body, and a stream's finish chunk carries "memory": {"stored": [ids]}.
//
// Logprobs, echo, prompt_logprobs and token ids (choice_outputs.h) arrive as ChoiceFields: merged
// into the choice and into the response or chunk object; their echo text goes before the text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/api_request.h"
#include "server/choice_outputs.h"
#include "server/memory_report.h"

namespace inferscale::server {

struct ResponseMeta {
  ApiKind kind = ApiKind::kChat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// usage.prompt_tokens_details holds cached_tokens (OpenAI's: served from the prefix cache) and
// injected_tokens (InferScale's: KV injected from the memory pool); both are part of prompt_tokens.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t injected_tokens = 0;
};

// A fresh id for `kind` (unique within the process, unpredictable across restarts).
std::string new_response_id(ApiKind kind);
int64_t unix_now();

std::string finish_reason_text(FinishReason r);

// `memory` and `extra` may be null (no memory object; nothing besides the text).
std::string response_body(const ResponseMeta& m, const std::string& text, FinishReason finish, const Usage& u,
                          const MemoryReport* memory = nullptr, const ChoiceFields* extra = nullptr);

// One "data: ...\n\n" event each.
// The first chunk: chat: the assistant role; completion: empty text. `memory`, `extra` may be null.
std::string sse_first_chunk(const ResponseMeta& m, bool include_usage, const MemoryReport* memory,
                            const ChoiceFields* extra = nullptr);
std::string sse_text_chunk(const ResponseMeta& m, const std::string& text, bool include_usage,
                           const ChoiceFields* extra = nullptr);
// `stored` (may be null): the ids memory.store wrote, sent as "memory": {"stored": [...]}.
std::string sse_finish_chunk(const ResponseMeta& m, FinishReason finish, bool include_usage,
                             const std::vector<int64_t>* stored = nullptr);
std::string sse_usage_chunk(const ResponseMeta& m, const Usage& u);
std::string sse_error(const std::string& error_body);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace inferscale::server
