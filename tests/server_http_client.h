// Client-side helpers for the HTTP server tests: a harness that runs AsyncEngine + HttpServer on
// an ephemeral loopback port, SSE parsing, Prometheus parsing and a raw socket for disconnects.
#pragma once
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "server/async_engine.h"
#include "server/http_server.h"
#include "server_test_model.h"

namespace inferscale::test_support {

using nlohmann::json;

// AsyncEngine + HttpServer around the test model, torn down engine first.
class Harness {
 public:
  Harness(server::AsyncEngineOptions eo = {}, server::HttpServerOptions ho = {}, int64_t num_blocks = 64) {
    // Built on the engine thread: the CPU backend sets that thread's OpenMP thread count.
    engine = std::make_unique<server::AsyncEngine>(
        [this, num_blocks] {
          auto be = std::make_unique<ControlledBackend>(model().backend(num_blocks), kPoison);
          backend = be.get();
          return model().engine(num_blocks, std::move(be));
        },
        eo);
    ho.host = "127.0.0.1";
    ho.port = 0;
    http = std::make_unique<server::HttpServer>(model().served(), *engine, ho);
    port = http->start();
  }
  ~Harness() {
    engine->shutdown();
    http->stop();
  }
  static const TestModel& model() {
    static const TestModel m;
    return m;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    c.set_write_timeout(30, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const json& body) const {
    return client().Post(path.c_str(), body.dump(), "application/json");
  }
  // Polls the engine's stats until `pred` holds (false after `seconds`).
  template <class P>
  bool wait_stats(P pred, int seconds = 30) const {
    for (int i = 0; i < seconds * 200; ++i) {
      if (pred(engine->stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  static constexpr int32_t kPoison = 7;  // a byte that makes the backend throw
  ControlledBackend* backend = nullptr;  // owned by the engine
  std::unique_ptr<server::AsyncEngine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = 0;
};

// The JSON payloads of "data: ..." events; "[DONE]" is returned as the string "[DONE]".
inline std::vector<json> parse_sse(const std::string& body) {
  std::vector<json> events;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == ':') continue;
    if (line.rfind("data: ", 0) != 0) throw std::runtime_error("not an SSE data line: " + line);
    const std::string payload = line.substr(6);
    events.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
  }
  return events;
}

// Prometheus text -> {"name{labels}": value}; throws on a malformed line.
inline std::map<std::string, double> parse_prometheus(const std::string& text) {
  static const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})?) ([-+]?([0-9.]+([eE][-+]?[0-9]+)?|Inf|NaN))$)");
  static const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, comment)) continue;
    if (!std::regex_match(line, m, sample)) throw std::runtime_error("bad metrics line: " + line);
    out[m[1]] = std::stod(m[3]);
  }
  return out;
}

// A plain TCP connection to the server, for requests that end with the client going away.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
  }
  ~RawConnection() { close(); }
  void send_post(const std::string& path, const std::string& body) {
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) throw std::runtime_error("send failed");
  }
  // Reads until `needle` has been seen (or the peer closes); returns everything read.
  std::string read_until(const std::string& needle) {
    std::string got;
    char buf[4096];
    while (got.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  void send_raw(const std::string& bytes) {
    if (::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
      throw std::runtime_error("send failed");
  }
  // Whether the server closes the connection within `seconds` (reading and dropping what it sends).
  bool closed_within(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace inferscale::test_support
