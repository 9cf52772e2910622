// Request bodies of Mem0's routes (its self-hosted server's and its platform API's), from raw bytes
// to the facts an add would store and the metadata an update would write, as mem0_handler.cpp
// takes them: the scope (entity ids, filters, AND lists), the messages in each accepted form, the
// turns and their metadata, and a memory id. The store is not touched.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/mem0_shapes.h"

using namespace inferscale;
using nlohmann::json;

namespace {

// An add: POST /v1/memories/ (the handler's checks, then what it stores).
void add(const httplib::Request& req, const json& body) {
  const server::Mem0Scope scope = server::mem0_scope(req, &body);
  const json* metadata = body.contains("metadata") ? &body["metadata"] : nullptr;
  if (metadata && !metadata->is_null() && !metadata->is_object()) return;  // the handler's 400
  const std::vector<server::Mem0Message> messages = server::mem0_messages(body);
  server::mem0_turns(messages, scope, metadata ? *metadata : json(), 0);
  (void)scope.owner();
  (void)scope.narrows();
}

// An update: PUT /v1/memories/{id}/ with new metadata over a stored memory's (its text from the
// body's "stored" string, standing for what the store held).
void update(const json& body) {
  if (!body.contains("metadata") || !(body["metadata"].is_object() || body["metadata"].is_null())) return;
  const auto stored = body.find("stored");
  server::mem0_updated_metadata(body["metadata"], stored != body.end() && stored->is_string() ? stored->get<std::string>() : "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::text(data, size));
  json body;
  try {
    body = server::parse_json_body(text);
  } catch (const server::ApiError&) {
    return 0;
  }
  httplib::Request req;  // no query parameters: the scope comes from the body
  for (auto* step : {+[](const httplib::Request& r, const json& b) { add(r, b); },
                     +[](const httplib::Request&, const json& b) { update(b); },
                     +[](const httplib::Request&, const json& b) {
                       if (b.contains("id") && b["id"].is_string()) server::parse_mem0_id(b["id"].get<std::string>());
                     }}) {
    try {
      step(req, body);
    } catch (const server::ApiError&) {
    } catch (const Error&) {
    }
  }
  return 0;
}
