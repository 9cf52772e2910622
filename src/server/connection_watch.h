// Detects that the client of an in-progress HTTP request has gone away, so its generation can be
// aborted (freeing its KV blocks) instead of running to the end for nobody.
//
// cpp-httplib 0.11 does not hand its handlers the connection's socket. We find it by its address
// pair: the accepted socket whose local and peer addresses equal the request's. That socket stays
// open (and so its descriptor cannot be reused) until the handler and its content provider have
// returned, which covers every use of a ConnectionWatch. If no socket matches (a platform without
// /proc, a race at lookup), closed() is always false: generation then ends at a failed write
// (streaming) or at its natural end (non-streaming).
//
// closed() is true once the peer has closed or reset the connection. A client that half-closes
// (shuts down only its sending side) after its request looks closed too; HTTP clients do not.
#pragma once
#include <string>

namespace inferscale::server {

class ConnectionWatch {
 public:
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  bool found() const { return fd_ >= 0; }
  // Cheap (one poll, no wait); call it from the thread serving the request.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace inferscale::server
