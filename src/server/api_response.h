// OpenAI-style response bodies and server-sent-event chunks for chat and text completions.
//
// Non-streaming:  {"id", "object": "chat.completion" | "text_completion", "created", "model",
//                  "choices": [{"index": 0, "message": {...} | "text", "finish_reason"}], "usage"}
// Streaming:      "data: {chunk}\n\n" ... "data: [DONE]\n\n"; chat chunks carry "delta"s (the first
//                 one the role), the last choice chunk the finish_reason, and with
//                 stream_options.include_usage a final chunk with "choices": [] and the usage
//                 (every other chunk then has "usage": null).
#pragma once
#include <cstdint>
#include <string>

#include "engine/request.h"
#include "server/api_request.h"

namespace inferscale::server {

struct ResponseMeta {
  ApiKind kind = ApiKind::kChat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// A fresh id for `kind` (unique within the process, unpredictable across restarts).
std::string new_response_id(ApiKind kind);
int64_t unix_now();

std::string finish_reason_text(FinishReason r);

std::string response_body(const ResponseMeta& m, const std::string& text, FinishReason finish, const Usage& u);

// One "data: ...\n\n" event each.
std::string sse_role_chunk(const ResponseMeta& m, bool include_usage);  // chat only: the assistant role
std::string sse_text_chunk(const ResponseMeta& m, const std::string& text, bool include_usage);
std::string sse_finish_chunk(const ResponseMeta& m, FinishReason finish, bool include_usage);
std::string sse_usage_chunk(const ResponseMeta& m, const Usage& u);
std::string sse_error(const std::string& error_body);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace inferscale::server
