#include "util/byte_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace inferscale {

ByteChannel& ByteChannel::operator=(ByteChannel&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ByteChannel::~ByteChannel() { close(); }

std::pair<ByteChannel, ByteChannel> ByteChannel::pair() {
  int fds[2];
  IS_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, kResource, "socketpair: {}", std::strerror(errno));
  return {ByteChannel(fds[0]), ByteChannel(fds[1])};
}

void ByteChannel::send(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // MSG_NOSIGNAL: a closed peer is an error here, not a SIGPIPE for the process.
    const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    IS_REQUIRE(w > 0, kUnavailable, "a tensor-parallel rank's channel is closed ({})", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void ByteChannel::recv(void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd_, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    IS_REQUIRE(r > 0, kUnavailable, "a tensor-parallel rank's channel is closed ({})", r == 0 ? "end of stream" : std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void ByteChannel::send_message(const std::vector<char>& bytes) {
  const uint64_t n = bytes.size();
  send(&n, sizeof(n));
  send(bytes.data(), bytes.size());
}

std::vector<char> ByteChannel::recv_message() {
  uint64_t n = 0;
  recv(&n, sizeof(n));
  // A message is a peer's, which this process started: a size past 16 GiB is a broken stream.
  IS_REQUIRE(n <= (uint64_t{1} << 34), kInvalidInput, "a tensor-parallel message of {} bytes", n);
  std::vector<char> bytes(n);
  recv(bytes.data(), n);
  return bytes;
}

void ByteChannel::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void ByteChannel::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace inferscale
