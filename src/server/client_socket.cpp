#include "server/client_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace vtllm::server {

namespace {

// The numeric host and port of a socket address, as getnameinfo formats them (cpp-httplib
// formats Request::remote_addr / local_addr the same way).
bool HostPort(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(s);
  return true;
}

bool Matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  std::string host;
  int port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !HostPort(addr, len, host, port) ||
      port != remote_port || host != remote_addr)
    return false;
  len = sizeof addr;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && HostPort(addr, len, host, port) &&
         port == local_port && host == local_addr;
}

}  // namespace

ClientSocket::ClientSocket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port) {
  if (remote_port <= 0 || local_port <= 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    struct stat st{};
    if (fd == own || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (Matches(fd, local_addr, local_port, remote_addr, remote_port)) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
}

bool ClientSocket::PeerClosed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace vtllm::server
