// Request bodies of the generation routes (OpenAI chat and text completions, memory objects and
// sampling fields included), from raw bytes to the native request, as the handlers parse them.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "server/api_error.h"
#include "server/api_request.h"

using namespace inferscale;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(fuzz::text(data, size));
  try {
    const nlohmann::json j = server::parse_json_body(body);
    try {
      server::parse_chat_request(j);
    } catch (const server::ApiError&) {
    } catch (const Error&) {
    }
    try {
      server::parse_completion_request(j);
    } catch (const server::ApiError&) {
    } catch (const Error&) {
    }
  } catch (const server::ApiError&) {
  }
  return 0;
}
