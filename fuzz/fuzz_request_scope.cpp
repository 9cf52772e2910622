// What a request carries besides its body: the query string and the headers, from raw bytes to
// what the server reads of them: the API key (Authorization: Bearer/Token, X-API-Key) checked
// against a keys table and the tenant headers rewritten (server/auth.h), the tenant header
// (server/tenant.h), Mem0's scope from the query's entity ids (mem0_shapes.h: GET /memories,
// search) and from a body beside them, and the integer query parameters of the list routes
// (url_path.h query_int). Each either answers or throws an ApiError or a typed Error.
//
// Input: the first line is the raw query string (httplib's parser splits and percent-decodes it),
// then header lines "Name: value" (repeats kept: a header given twice is a case) up to an empty
// line, then a JSON body (may be empty).
#include <httplib.h>
#include <stdlib.h>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/auth.h"
#include "server/mem0_shapes.h"
#include "server/tenant.h"
#include "server/url_path.h"

using namespace inferscale;
using nlohmann::json;

namespace {

// A keys table of two tenants, read from a file as `serve --api-keys` reads it.
const server::ApiKeys& keys() {
  static const std::unique_ptr<server::ApiKeys> k = std::make_unique<server::ApiKeys>(
      fuzz::temp_file("inferscale-fuzz-keys", "sk-acme-7f3c2a10d4 acme\nsk-globex-55aa01 globex\n"));
  return *k;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The input's query line and header lines into `req`; returns the body.
std::string_view split_request(std::string_view in, httplib::Request& req) {
  size_t nl = in.find('\n');
  const std::string_view query = in.substr(0, nl);
  req.params.clear();
  httplib::detail::parse_query_text(std::string(query), req.params);
  in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  while (!in.empty()) {
    nl = in.find('\n');
    const std::string_view line = trim(in.substr(0, nl));
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    req.headers.emplace(std::string(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
  }
  return in;
}

template <class F>
void answer(F&& f) {
  try {
    f();
  } catch (const server::ApiError&) {
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Request req;
  const std::string_view body = split_request(fuzz::text(data, size), req);
  answer([&] {
    httplib::Request authed = req;
    if (server::authenticate(authed, &keys())) return;  // 401: nothing else runs
    (void)server::request_tenant(authed);
  });
  answer([&] { (void)server::request_tenant(req); });
  answer([&] {
    const server::Mem0Scope scope = server::mem0_scope(req, nullptr);
    (void)scope.owner();
    (void)scope.narrows();
  });
  answer([&] {
    const json j = server::parse_json_body(std::string(body));
    const server::Mem0Scope scope = server::mem0_scope(req, &j);
    (void)scope.owner();
  });
  for (const char* name : {"top_k", "limit", "page", "page_size", "after"})
    answer([&] { (void)server::query_int(req, name, 1, 1000); });
  return 0;
}
