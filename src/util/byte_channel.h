// A blocking, ordered byte stream between two threads or processes: one end of a Unix socketpair.
// Tensor-parallel ranks talk through these (backend/rank_group.h): commands and replies, and the
// CPU's all-reduce. send() writes all its bytes, recv() reads exactly the asked number; a peer
// that closed its end (it failed, or exited) makes them throw kUnavailable. A channel made
// before fork() works across the two processes.
//
// Wire builds a message of trivially copyable values and vectors of them; WireReader reads one
// back in the same order (kInvalidInput on a short or oversized message).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "util/check.h"

namespace inferscale {

class ByteChannel {
 public:
  ByteChannel() = default;
  explicit ByteChannel(int fd) : fd_(fd) {}
  ByteChannel(ByteChannel&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ByteChannel& operator=(ByteChannel&& o) noexcept;
  ByteChannel(const ByteChannel&) = delete;
  ByteChannel& operator=(const ByteChannel&) = delete;
  ~ByteChannel();

  // The two connected ends.
  static std::pair<ByteChannel, ByteChannel> pair();

  void send(const void* data, size_t n);
  void recv(void* data, size_t n);
  // A message: its size (uint64), then its bytes.
  void send_message(const std::vector<char>& bytes);
  std::vector<char> recv_message();
  // Ends both directions: the peer's reads and writes fail (and so do ours).
  void shutdown();
  // Closes this end (in a forked child, the ends it does not use).
  void close();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

class Wire {
 public:
  template <class T>
  Wire& put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const char* p = reinterpret_cast<const char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  template <class T>
  Wire& put(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put(static_cast<uint64_t>(v.size()));
    const char* p = reinterpret_cast<const char*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
    return *this;
  }
  Wire& put_bytes(const void* data, size_t n) {
    put(static_cast<uint64_t>(n));
    const char* p = static_cast<const char*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
    return *this;
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::vector<char> bytes_;
};

class WireReader {
 public:
  explicit WireReader(std::vector<char> bytes) : bytes_(std::move(bytes)) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  template <class T>
  void get(T& v) {
    v = get<T>();
  }
  template <class T>
  void get(std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const uint64_t n = get<uint64_t>();
    IS_REQUIRE(n <= (bytes_.size() - at_) / sizeof(T), kInvalidInput, "a message holds {} values past its end", n);
    v.resize(n);
    if (n) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
  }
  // A put_bytes() run: its size and where its bytes are (valid while this reader lives).
  std::pair<const char*, size_t> get_bytes() {
    const uint64_t n = get<uint64_t>();
    IS_REQUIRE(n <= bytes_.size() - at_, kInvalidInput, "a message holds {} bytes past its end", n);
    return {take(n), n};
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const char* take(size_t n) {
    IS_REQUIRE(n <= bytes_.size() - at_, kInvalidInput, "a message ends {} bytes early", n - (bytes_.size() - at_));
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  std::vector<char> bytes_;
  size_t at_ = 0;
};

}  // namespace inferscale
