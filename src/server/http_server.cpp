#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/api_response.h"
#include "server/auth.h"
#include "server/connection_pool.h"
#include "server/connection_server.h"
#include "server/generate_handler.h"
#include "server/mem0_handler.h"
#include "server/memory_handler.h"
#include "util/check.h"

namespace inferscale::server {
namespace {

using nlohmann::json;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(e.body(), "application/json");
}

void send_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// Runs a handler and turns whatever it throws into the matching JSON error.
template <class F>
httplib::Server::Handler guarded(F f) {
  return [f = std::move(f)](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (...) {
      send_error(res, api_error_from(std::current_exception()));
    }
  };
}

// The error body for statuses httplib produces by itself (no handler ran or none matched).
ApiError error_for_status(const httplib::Request& req, int status, size_t max_body) {
  switch (status) {
    case 404: return ApiError(404, "not_found_error", fmt::format("unknown route: {} {}", req.method, req.path), {}, "unknown_route");
    case 413:
      return ApiError(413, "invalid_request_error", fmt::format("the request body is larger than {} bytes", max_body), {},
                      "payload_too_large");
    case 414: return ApiError(414, "invalid_request_error", "the request URI is too long");
    default:
      if (status >= 500) return ApiError(status, "server_error", fmt::format("HTTP {}", status));
      return ApiError(status, "invalid_request_error", fmt::format("malformed HTTP request (status {})", status));
  }
}

// Options of the listening socket: SO_REUSEADDR (a restarted server can bind while old
// connections sit in TIME_WAIT) but not cpp-httplib's default SO_REUSEPORT, which lets a second
// server bind the same port and the kernel split the connections between the two.
void listen_socket_options(socket_t sock) {
  const int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

// Why binding host:port failed, found by trying it once more with a socket of our own (httplib
// reports only that it failed).
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    return fmt::format("cannot listen on {}:{}: {}", host, port, gai_strerror(rc));
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr && err != EADDRINUSE; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    listen_socket_options(fd);
    err = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (err == EADDRINUSE) return fmt::format("port {} is already in use (another process listens on {}:{})", port, host, port);
  if (err != 0) return fmt::format("cannot listen on {}:{}: {}", host, port, std::strerror(err));
  return fmt::format("cannot listen on {}:{}", host, port);
}

}  // namespace

namespace {

std::chrono::milliseconds ms_of(double seconds, const char* name) {
  IS_REQUIRE(seconds > 0 && seconds <= 86400, kInvalidInput, "{} must be in (0, 86400] seconds, got {}", name, seconds);
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000)));
}

ConnectionLimits limits_of(const HttpServerOptions& o) {
  ConnectionLimits l;
  l.keep_alive_timeout = ms_of(o.keep_alive_timeout_s, "the keep-alive timeout");
  l.read_timeout = ms_of(o.read_timeout_s, "the read timeout");
  l.write_timeout = ms_of(o.write_timeout_s, "the write timeout");
  IS_REQUIRE(o.listen_backlog >= 1, kInvalidInput, "the listen backlog must be >= 1, got {}", o.listen_backlog);
  l.backlog = o.listen_backlog;
  return l;
}

}  // namespace

HttpServer::HttpServer(ServedModel model, AsyncEngine& engine, HttpServerOptions opts, MemoryProvider* memory)
    : model_(std::move(model)), engine_(engine), opts_(std::move(opts)), memory_(memory), created_(unix_now()),
      svr_(std::make_unique<ConnectionServer>(limits_of(opts_))) {
  IS_REQUIRE(model_.tokenizer != nullptr, kInvalidInput, "the served model has no tokenizer");
  IS_REQUIRE(opts_.http_threads >= 0, kInvalidInput, "http_threads must be >= 0, got {}", opts_.http_threads);
  if (opts_.http_threads == 0) opts_.http_threads = static_cast<int>(std::min<int64_t>(engine_.max_pending() + 1024, 65536));
  routes();
}

HttpServer::~HttpServer() { stop(); }

std::string HttpServer::url() const { return fmt::format("http://{}:{}", opts_.host, port_); }

// Every route, in groups: authentication first, the API families, the server's own routes, and
// the answers to what no route takes.
void HttpServer::routes() {
  httplib::Server& s = *svr_;
  const size_t threads = static_cast<size_t>(opts_.http_threads);
  s.new_task_queue = [threads] { return new ConnectionPool(threads); };
  s.set_socket_options(listen_socket_options);
  s.set_payload_max_length(opts_.max_body_bytes);
  authentication_routes();
  generation_routes();
  memory_routes();
  server_routes();
  fallback_routes();
}

void HttpServer::authentication_routes() {
  httplib::Server& s = *svr_;
  // Authentication (auth.h), before any route matches: every route is behind it, also unknown
  // ones and those registered below in the future. httplib passes the handlers this same Request
  // (its own, non-const object), so the tenant header the layer rewrites is what they read.
  s.set_pre_routing_handler([keys = opts_.api_keys](const httplib::Request& req, httplib::Response& res) {
    const std::optional<ApiError> rejected = authenticate(const_cast<httplib::Request&>(req), keys.get());
    if (!rejected) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, *rejected);
    if (rejected->status == 401) res.set_header("WWW-Authenticate", kAuthChallenge);
    // The body was not read: the connection must not be read again for a next request.
    res.set_header("Connection", "close");
    ConnectionServer::close_after_answer();
    return httplib::Server::HandlerResponse::Handled;
  });
}

void HttpServer::generation_routes() {
  httplib::Server& s = *svr_;
  auto gen = std::make_shared<GenerateHandler>(model_, engine_, metrics_, memory_);
  s.Post("/v1/chat/completions", guarded([gen](const httplib::Request& req, httplib::Response& res) {
    gen->handle(req, res, ApiKind::kChat);
  }));
  s.Post("/v1/completions", guarded([gen](const httplib::Request& req, httplib::Response& res) {
    gen->handle(req, res, ApiKind::kCompletion);
  }));
}

// The memory REST API and Mem0's two surfaces, over one store.
void HttpServer::memory_routes() {
  httplib::Server& s = *svr_;
  // The memory REST API: one handler routes every method under /v1/memory (memory_handler.h).
  // [\s\S] and not '.': httplib matches the decoded path, which may hold a newline.
  auto mem = std::make_shared<MemoryHandler>(memory_);
  const auto memory_api = guarded([mem](const httplib::Request& req, httplib::Response& res) { mem->handle(req, res); });
  const char* memory_paths = R"(/v1/memory(/[\s\S]*)?)";
  s.Get(memory_paths, memory_api);
  s.Post(memory_paths, memory_api);
  s.Put(memory_paths, memory_api);
  s.Patch(memory_paths, memory_api);
  s.Delete(memory_paths, memory_api);

  // Mem0's two API surfaces over the same store (mem0_handler.h); it writes its own errors.
  auto mem0 = std::make_shared<Mem0Handler>(memory_);
  const auto mem0_api = [mem0](const httplib::Request& req, httplib::Response& res) { mem0->handle(req, res); };
  for (const char* pattern : Mem0Handler::kPathPatterns) {
    s.Get(pattern, mem0_api);
    s.Post(pattern, mem0_api);
    s.Put(pattern, mem0_api);
    s.Patch(pattern, mem0_api);
    s.Delete(pattern, mem0_api);
  }
}

// The models, health and metrics.
void HttpServer::server_routes() {
  httplib::Server& s = *svr_;
  auto model_json = [this] {
    return json{{"id", model_.name}, {"object", "model"}, {"created", created_}, {"owned_by", "inferscale"},
                {"max_model_len", engine_.max_model_len()}};
  };
  s.Get("/v1/models", guarded([model_json](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"object", "list"}, {"data", json::array({model_json()})}});
  }));
  s.Get("/v1/models/(.+)", guarded([this, model_json](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != model_.name) throw ApiError(404, "invalid_request_error", fmt::format("the model '{}' does not exist", id), "model", "model_not_found");
    send_json(res, model_json());
  }));
  // 503 while the engine drains for a stop, so a load balancer's health check takes the replica
  // out before its requests are refused.
  s.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
    if (engine_.stopping()) {
      send_json(res, {{"status", "shutting_down"}});
      res.status = 503;
      res.set_header("Retry-After", "5");
      return;
    }
    send_json(res, {{"status", "ok"}});
  }));
  s.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    std::string m = metrics_.render(engine_.stats());
    if (memory_ != nullptr) m += ServerMetrics::render_background(memory_->background());
    res.set_content(m, "text/plain; version=0.0.4; charset=utf-8");
  }));
}

// Wrong methods, statuses without a handler, exceptions, and the access log.
void HttpServer::fallback_routes() {
  httplib::Server& s = *svr_;
  // A known route asked with the wrong method.
  auto wrong_method = [](const char* allowed) {
    return guarded([allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      throw ApiError(405, "invalid_request_error", fmt::format("{} is not allowed on {}; use {}", req.method, req.path, allowed), {},
                     "method_not_allowed");
    });
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    s.Get(path, wrong_method("POST"));
    s.Put(path, wrong_method("POST"));
    s.Delete(path, wrong_method("POST"));
  }
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
    s.Post(path, wrong_method("GET"));
    s.Put(path, wrong_method("GET"));
    s.Delete(path, wrong_method("GET"));
  }

  // Statuses httplib sets without a handler (404, 413, malformed requests) get a JSON body too;
  // bodies that a handler already wrote are kept.
  const size_t max_body = opts_.max_body_bytes;
  s.set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const ApiError e = error_for_status(req, res.status, max_body);
    res.set_content(e.body(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    send_error(res, api_error_from(ep));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.record_status(res.status);
    spdlog::debug("{} {} -> {}", req.method, req.path, res.status);
  });
}

int HttpServer::start() {
  IS_REQUIRE(!thread_.joinable(), kInvalidInput, "the server is already started");
  std::signal(SIGPIPE, SIG_IGN);
  if (opts_.port == 0) {
    port_ = svr_->bind_to_any_port(opts_.host);
    IS_REQUIRE(port_ > 0, kResource, "cannot listen on {} (any port)", opts_.host);
  } else {
    IS_REQUIRE(svr_->bind_to_port(opts_.host, opts_.port), kResource, "{}", bind_failure(opts_.host, opts_.port));
    port_ = opts_.port;
  }
  svr_->apply_backlog();
  if (!opts_.api_keys && !is_loopback_host(opts_.host))
    spdlog::warn("listening on {}:{} without API keys: anyone who can reach it can read, change and delete every "
                 "tenant's memory; give --api-keys FILE, or listen on 127.0.0.1", opts_.host, port_);
  thread_ = std::thread([this] {
    if (!svr_->listen_after_bind()) spdlog::error("the HTTP server stopped with an error");
  });
  // stop() is a no-op until the accept loop runs: wait for it, so a quick stop cannot be lost.
  while (!svr_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port_;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  // Idle keep-alive connections close now (they would otherwise hold the stop for their
  // keep-alive timeout); answers in progress get a second to finish.
  svr_->begin_stop(std::chrono::milliseconds(1000));
  svr_->stop();
  thread_.join();
}

}  // namespace inferscale::server
