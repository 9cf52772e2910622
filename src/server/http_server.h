// The OpenAI-compatible HTTP server (cpp-httplib):
//
//   POST /v1/chat/completions   POST /v1/completions   (generate_handler.h)
//   GET  /v1/models             GET  /v1/models/{id}
//   GET  /health                GET  /metrics (Prometheus text)
//   /v1/memory/...              the memory REST API (memory_handler.h)
//   /memories, /search, /v1/ping/, /v1|v2|v3/memories/...   Mem0's APIs (mem0_handler.h)
//
// Authentication runs before routing, for every route (auth.h): with API keys, a request without
// a valid key gets 401 and the tenant is the key's; without keys the server is open, and start()
// warns when it listens on a non-loopback address.
//
// Every error is an OpenAI-style JSON error (api_error.h): unknown routes 404, a wrong method on a
// known route 405, bodies over max_body_bytes 413, the rest as mapped by api_error_from.
//
// Threads: a ConnectionPool (connection_pool.h) serves each connection on a thread of its own,
// started on demand up to `http_threads` (parse, template, tokenize, wait for outputs); the
// AsyncEngine's thread runs the model. Idle and slow clients cost a sleeping thread each, bounded
// by the keep-alive and read timeouts (connection_server.h), so they cannot starve /health or
// /metrics. Starting the server ignores SIGPIPE process-wide, so a client that disconnects
// mid-write cannot kill the process.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "server/api_keys.h"
#include "server/async_engine.h"
#include "server/memory_provider.h"
#include "server/metrics.h"
#include "server/served_model.h"

namespace inferscale::server {

class ConnectionServer;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0 = any free port (see port())
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  // Connections served at once (a thread each, started on demand); 0 = the engine's max_pending
  // + 1024. A generation holds its thread while it runs and idle keep-alive connections hold
  // theirs until keep_alive_timeout_s, so this must exceed max_pending by the number of other
  // clients that may be connected at once.
  int http_threads = 0;
  double keep_alive_timeout_s = 5;  // an idle connection is closed after this long without a request
  double read_timeout_s = 10;       // a request's headers and body must arrive in full within this
  double write_timeout_s = 10;      // each write of an answer (a client not reading a stream)
  int listen_backlog = 1024;        // connections the kernel queues before the server accepts them
  // API keys and their tenants (auth.h); null: no keys, every route open. Shared so that the
  // owner can reload() them (SIGHUP) while the server runs.
  std::shared_ptr<const ApiKeys> api_keys;
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
  // Stops accepting connections and waits for the handlers in flight: idle connections are closed
  // at once, answers in progress get up to a second. Shut the AsyncEngine down first so that
  // handlers waiting on generations return promptly. Idempotent.
  void stop();
  int port() const { return port_; }
  std::string url() const;
  ServerMetrics& metrics() { return metrics_; }

 private:
  void routes();
  void authentication_routes();
  void generation_routes();
  void memory_routes();
  void server_routes();
  void fallback_routes();

  ServedModel model_;
  AsyncEngine& engine_;
  HttpServerOptions opts_;
  MemoryProvider* memory_;
  ServerMetrics metrics_;
  int64_t created_;
  std::unique_ptr<ConnectionServer> svr_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace inferscale::server
