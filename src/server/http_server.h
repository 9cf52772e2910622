// The OpenAI-compatible HTTP server (cpp-httplib):
//
//   POST /v1/chat/completions   POST /v1/completions   (generate_handler.h)
//   GET  /v1/models             GET  /v1/models/{id}
//   GET  /health                GET  /metrics (Prometheus text)
//   /v1/memory/...              the memory REST API (memory_handler.h)
//
// Every error is an OpenAI-style JSON error (api_error.h): unknown routes 404, a wrong method on a
// known route 405, bodies over max_body_bytes 413, the rest as mapped by api_error_from.
//
// Threads: cpp-httplib's pool of `http_threads` serves connections (parse, template, tokenize,
// wait for outputs); the AsyncEngine's thread runs the model. Starting the server ignores SIGPIPE
// process-wide, so a client that disconnects mid-write cannot kill the process.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "server/async_engine.h"
#include "server/memory_provider.h"
#include "server/metrics.h"
#include "server/served_model.h"

namespace httplib {
class Server;
}

namespace inferscale::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0 = any free port (see port())
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  // Connections served at once; 0 = the engine's max_pending + 16. A generation holds its HTTP
  // thread while it runs, so the pool must be larger than max_pending for requests past that
  // limit to get their 503 at once (and /health, /metrics to answer) rather than wait for a thread.
  int http_threads = 0;
};

class HttpServer {
 public:
  // `engine` (and `memory`, which may be null) must outlive the server. `memory` serves both the
  // requests' memory objects and the memory REST API; null disables both.
  HttpServer(ServedModel model, AsyncEngine& engine, HttpServerOptions opts, MemoryProvider* memory = nullptr);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread. Throws Error(kResource) when the address
  // cannot be bound ("port 8000 is already in use ..." when another process listens there: the
  // socket has SO_REUSEADDR but not SO_REUSEPORT, so two servers never share a port). Returns
  // the bound port.
  int start();
  // Stops accepting connections and waits for the handlers in flight. Shut the AsyncEngine down
  // first so that handlers waiting on generations return promptly. Idempotent.
  void stop();
  int port() const { return port_; }
  std::string url() const;
  ServerMetrics& metrics() { return metrics_; }

 private:
  void routes();

  ServedModel model_;
  AsyncEngine& engine_;
  HttpServerOptions opts_;
  MemoryProvider* memory_;
  ServerMetrics metrics_;
  int64_t created_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace inferscale::server
