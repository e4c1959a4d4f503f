// Finding out that the client of a request has gone away while it waits for a non-streaming
// response. cpp-httplib 0.11 gives a handler the connection's addresses but not its socket,
// and it only learns of a closed connection when a write fails; a non-streaming handler
// writes nothing until the response is complete. ClientSocket finds the connection's socket
// among the process's descriptors by its two addresses, and PeerClosed() asks the kernel
// whether the peer has closed its side (POLLRDHUP), without reading or writing.
#pragma once

#include <string>

namespace vtllm::server {

class ClientSocket {
 public:
  // Looks up the TCP socket whose local and peer addresses are these (numeric host strings,
  // as cpp-httplib's Request holds them). Not found (e.g. not Linux): PeerClosed() is false.
  ClientSocket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the client has closed the connection (or it failed). The handler's own thread
  // owns the socket until it returns, so the descriptor cannot be reused meanwhile.
  bool PeerClosed() const;

 private:
  int fd_ = -1;
};

}  // namespace vtllm::server
