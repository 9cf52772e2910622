// Whole HTTP requests from raw bytes, through a real socket: the server (HttpServer with API keys,
// the demo model in an AsyncEngine, started once on a loopback port) reads them with cpp-httplib's
// parser inside our connection handling (connection_server.h: deadlines, keep-alive, close), then
// authentication, routing, the bodies' parsers and, for what parses, generation. One input is
// one connection: its bytes are written (several requests when they pipeline), the write side is
// closed, and the answer is read to the end. A crash or a sanitizer report on any server thread
// ends the run; so does a connection the server neither answers nor closes within 8 s.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "fuzz_input.h"
#include "model/model.h"
#include "server/async_engine.h"
#include "server/http_server.h"

using namespace inferscale;

namespace {

struct Served {
  std::unique_ptr<server::AsyncEngine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = 0;
};

Served& served() {
  static Served* s = [] {
    static const Model m = load_model("demo");
    auto* out = new Served;
    out->engine = std::make_unique<server::AsyncEngine>([] {
      BackendOptions bo;
      bo.num_cache_blocks = 64;
      bo.num_threads = 1;
      EngineOptions eo;
      eo.max_model_len = 512;  // a generation that parses is short whatever it asks for
      return std::make_unique<Engine>(make_cpu_backend(m.config, m.weights, bo), m.tokenizer, eo);
    });
    server::HttpServerOptions ho;
    ho.host = "127.0.0.1";
    ho.port = 0;
    ho.max_body_bytes = 64 * 1024;
    ho.read_timeout_s = 2;
    ho.keep_alive_timeout_s = 2;
    ho.write_timeout_s = 2;
    // One tenant's key: requests without it get 401, with it the routes run.
    ho.api_keys = std::make_shared<server::ApiKeys>(fuzz::temp_file("inferscale-fuzz-http-keys", "sk-fuzz-0123456789 acme\n"));
    out->http = std::make_unique<server::HttpServer>(server::ServedModel::from(m), *out->engine, ho);
    out->port = out->http->start();
    return out;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = served().port;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  // The request's bytes (the server may answer and close before it read them all: a 413, a 401).
  for (size_t at = 0; at < size;) {
    const ssize_t n = send(fd, data + at, size - at, MSG_NOSIGNAL);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  // The answer, to the server's close.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      std::fprintf(stderr, "fuzz_http_socket: the server neither answered nor closed within 8 s\n");
      std::abort();
    }
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
  }
  close(fd);
  return 0;
}
