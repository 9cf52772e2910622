// The memory REST API (server/memory_handler.h) end to end on a real store: raw bytes become one
// request (a route, its path parameters and query, a body), which MemoryHandler::handle routes,
// parses and runs against a FactStore in a temporary folder (SQLite) with BM25 and neighbour
// expansion over it, so hostile records, patches, searches and paths reach the store's writes and
// the retrievers' indexes. A request either answers with JSON or throws the errors the server
// turns into statuses (ApiError; inferscale::Error of a named kind). A kInternal Error is a broken
// invariant reached from input: it ends the run as a crash.
//
// Input: byte 0 picks the route; then, up to the first two newlines, the {user} segment and the
// {id} segment or the query string (raw, percent-decoded by the handler); the rest is the body.
#include <httplib.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/retrieval/neighbour_retriever.h"
#include "memory/store/fact_store.h"
#include "server/api_error.h"
#include "server/memory_handler.h"
#include "server/memory_provider.h"

using namespace inferscale;

namespace {

// The store and retriever the memory routes use; the routes never prepare a prompt.
class RestMemory final : public server::MemoryProvider {
 public:
  RestMemory() {
    char tmpl[] = "/tmp/inferscale-fuzz-rest-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    store_ = FactStore::open(tmpl);
    retriever_ = std::make_unique<NeighbourRetriever>(*store_, std::make_unique<Bm25Retriever>(*store_));
  }
  server::PreparedPrompt prepare(const server::GenerateRequest&, const server::PromptFit&) override {
    IS_THROW(kUnsupported, "the memory routes build no prompt");
  }
  FactStore& store() override { return *store_; }
  const Retriever& retriever() const override { return *retriever_; }

 private:
  std::unique_ptr<FactStore> store_;
  std::unique_ptr<Retriever> retriever_;
};

struct RouteShape {
  const char* method;
  const char* path;  // {u}: the user segment; {i}: the id segment; ? appends the query
};
constexpr RouteShape kShapes[] = {
    {"GET", "/v1/memory/users"},          {"GET", "/v1/memory/users/{u}"},
    {"DELETE", "/v1/memory/users/{u}"},   {"POST", "/v1/memory/users/{u}/facts"},
    {"GET", "/v1/memory/users/{u}/facts?"}, {"GET", "/v1/memory/users/{u}/facts/{i}"},
    {"PATCH", "/v1/memory/users/{u}/facts/{i}"}, {"DELETE", "/v1/memory/users/{u}/facts/{i}"},
    {"POST", "/v1/memory/users/{u}/search"}, {"PUT", "/v1/memory/users/{u}/facts"},
};

std::string_view next_line(std::string_view& rest) {
  const size_t nl = rest.find('\n');
  const std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  return line;
}

std::string target_of(const RouteShape& shape, std::string_view user, std::string_view second) {
  std::string t;
  for (const char* p = shape.path; *p; ++p) {
    if (p[0] == '{' && p[1] == 'u') {
      t += user;
      p += 2;
    } else if (p[0] == '{' && p[1] == 'i') {
      t += second;
      p += 2;
    } else if (*p == '?') {
      t += '?';
      t += second;
    } else {
      t += *p;
    }
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static RestMemory memory;
  static const server::MemoryHandler handler(&memory);
  if (size == 0) return 0;
  const RouteShape& shape = kShapes[data[0] % std::size(kShapes)];
  std::string_view rest = fuzz::text(data + 1, size - 1);
  const std::string_view user = next_line(rest), second = next_line(rest);
  httplib::Request req;
  req.method = shape.method;
  req.target = target_of(shape, user, second);
  const size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) httplib::detail::parse_query_text(req.target.substr(q + 1), req.params);  // as the server does
  req.body = std::string(rest);
  httplib::Response res;
  try {
    handler.handle(req, res);
  } catch (const server::ApiError&) {
    return 0;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) std::abort();  // a broken invariant, reached from input
    return 0;
  }
  // Answered: the body is JSON.
  if (!nlohmann::json::accept(res.body)) std::abort();
  return 0;
}
