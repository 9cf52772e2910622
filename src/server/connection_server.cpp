#include "server/connection_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace inferscale::server {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until `fd` has `events` or `deadline` passes; true when ready (or closed: the next
// read or write then reports it).
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(serv);
}

// One request's view of the socket: every read must arrive before the request's deadline (so a
// client that trickles bytes cannot hold the connection past read_timeout), every write within
// write_timeout. Reads are buffered: httplib reads the request line and headers byte by byte.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, Clock::time_point read_deadline, std::chrono::milliseconds write_timeout)
      : fd_(fd), read_deadline_(read_deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override { return have_ < got_ || wait_fd(fd_, POLLIN, read_deadline_); }
  bool is_writable() const override { return wait_fd(fd_, POLLOUT, Clock::now() + write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (have_ == got_) {
      if (!wait_fd(fd_, POLLIN, read_deadline_)) return -1;
      if (size >= sizeof buf_) return recv_some(ptr, size);  // a large read (a body) goes straight through
      const ssize_t n = recv_some(buf_, sizeof buf_);
      if (n <= 0) return n;
      have_ = 0;
      got_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, got_ - have_);
    std::memcpy(ptr, buf_ + have_, n);
    have_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0 || errno != EINTR) return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t recv_some(char* ptr, size_t size) {
    for (;;) {
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n >= 0 || errno != EINTR) return n;
    }
  }

  int fd_;
  Clock::time_point read_deadline_;
  std::chrono::milliseconds write_timeout_;
  char buf_[4096];
  size_t have_ = 0, got_ = 0;  // buf_[have_, got_) is read but not yet consumed
};

// Set by close_after_answer() on the thread running process_request; read right after it.
thread_local bool t_close_after_answer = false;

// A lingering close (as HTTP servers do, RFC 9112 section 9.6): after an answer sent without
// reading the request's body, send FIN, then read and drop what the client still sends, until it
// closes or `limit` passes. Closing with unread bytes would send a RST, which can make the client
// lose the answer before reading it.
void drain_before_close(int fd, std::chrono::milliseconds limit) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = Clock::now() + limit;
  char buf[16384];
  while (wait_fd(fd, POLLIN, deadline)) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EINTR)) return;
  }
}

}  // namespace

void ConnectionServer::close_after_answer() { t_close_after_answer = true; }

ConnectionServer::ConnectionServer(ConnectionLimits limits) : limits_(limits) {}

void ConnectionServer::apply_backlog() {
  // listen() again on a listening socket only changes its backlog (Linux, BSD).
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, limits_.backlog);
}

size_t ConnectionServer::open_connections() const {
  std::lock_guard lk(mu_);
  return open_.size();
}

void ConnectionServer::begin_stop(std::chrono::milliseconds drain) {
  std::unique_lock lk(mu_);
  stopping_ = true;
  for (const auto& [sock, busy] : open_)
    if (!busy) ::shutdown(sock, SHUT_RDWR);  // wakes its keep-alive wait
  if (!closed_cv_.wait_for(lk, drain, [&] { return open_.empty(); }))
    for (const auto& [sock, busy] : open_) ::shutdown(sock, SHUT_RDWR);
}

bool ConnectionServer::wait_for_request(socket_t sock) {
  if (!wait_fd(sock, POLLIN, Clock::now() + limits_.keep_alive_timeout)) return false;
  char c;
  const ssize_t n = ::recv(sock, &c, 1, MSG_PEEK);
  return n > 0;  // 0: closed by the client (or by begin_stop)
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  // No Nagle: httplib writes an answer's headers and its body (and each SSE event) in separate
  // sends, and Nagle would hold every send after the first until the client's delayed ACK (~40 ms
  // on Linux), on every answer of a keep-alive connection (a streamed TTFT of 47 ms on the demo
  // model over loopback, a Mem0 search of 48 ms, before this).
  const int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  {
    std::lock_guard lk(mu_);
    open_[sock] = false;
  }
  bool ok = true;
  for (int served = 0; served < limits_.keep_alive_max; ++served) {
    {
      // A connection that waited in the pool's queue through a stop must not wait for a request.
      std::lock_guard lk(mu_);
      if (stopping_) break;
    }
    if (!wait_for_request(sock)) break;  // begin_stop shuts an idle socket down: this returns at once
    bool last = served + 1 == limits_.keep_alive_max;
    {
      std::lock_guard lk(mu_);
      if (stopping_) break;
      open_[sock] = true;
    }
    DeadlineStream stream(sock, Clock::now() + limits_.read_timeout, limits_.write_timeout);
    bool connection_closed = false;
    t_close_after_answer = false;
    ok = process_request(stream, last, connection_closed, nullptr);
    {
      std::lock_guard lk(mu_);
      open_[sock] = false;
      last = last || stopping_;
    }
    if (t_close_after_answer) {
      drain_before_close(sock, std::chrono::milliseconds(1000));
      break;
    }
    if (!ok || connection_closed || last) break;
  }
  {
    // Closed under the lock: once the descriptor is free, a new connection may get its number.
    std::lock_guard lk(mu_);
    open_.erase(sock);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  closed_cv_.notify_all();
  return ok;
}

}  // namespace inferscale::server
