// cpp-httplib's Server with the connection handling a public server needs, in place of the
// library's own (whose knobs are compiled into the Debian .so: a listen backlog of 5, a
// per-read timeout that a client trickling bytes keeps resetting, idle keep-alive connections
// that only notice a stop after their keep-alive timeout):
//
//   accept (httplib's loop) -> ConnectionPool thread -> process_and_close_socket (here, TCP_NODELAY):
//     loop:  wait for the next request's first byte   up to keep_alive_timeout, or until stop
//            read the request (headers and body)      all of it within read_timeout
//            handler, write the answer                each write within write_timeout
//     close after keep_alive_max requests, on "Connection: close", or when the server stops
//
// The request itself is parsed and dispatched by httplib's process_request (protected), through a
// Stream over the socket (connection_server.cpp) that enforces those deadlines.
//
// Stop (begin_stop): no connection starts another request; idle ones are shut down at once;
// those in the middle of a request finish it (its answer says "Connection: close") until the
// drain deadline, then they are shut down too.
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <unordered_map>

namespace inferscale::server {

struct ConnectionLimits {
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle time allowed between requests
  std::chrono::milliseconds read_timeout{10000};       // one request's headers and body, in full
  std::chrono::milliseconds write_timeout{10000};      // one write of the answer
  int keep_alive_max = 100;                            // requests per connection
  int backlog = 1024;                                  // the listening socket's accept queue
};

class ConnectionServer final : public httplib::Server {
 public:
  explicit ConnectionServer(ConnectionLimits limits);

  // After bind_to_port / bind_to_any_port: sets the real listen backlog.
  void apply_backlog();
  // Stops taking requests on open connections (see the header comment) and returns once every
  // connection has closed, or `drain` has passed and the rest were shut down.
  void begin_stop(std::chrono::milliseconds drain);
  size_t open_connections() const;

  // Called from a handler (on the thread serving the request): the connection closes once this
  // answer is written, however the client asked. For answers sent without reading the request's
  // body (a rejection before routing), whose unread bytes must not be parsed as a next request:
  // the close lingers (FIN sent, what the client still sends read and dropped, up to a second) so
  // that the client gets the answer rather than a reset.
  static void close_after_answer();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits for the first byte of the next request: false on timeout, close or stop.
  bool wait_for_request(socket_t sock);

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable closed_cv_;
  std::unordered_map<socket_t, bool> open_;  // socket -> busy (reading or answering a request)
  bool stopping_ = false;
};

}  // namespace inferscale::server
