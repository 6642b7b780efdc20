// An outsider's connections for the tests of what a listening socket holds and refuses: TCP
// connections that never send a byte, and how many of them the server accepted into its queue.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace slowpipe::runtime {

// `n` TCP connections to 127.0.0.1:port that never send a byte (an outsider's held handshakes).
inline std::vector<int> holdConnections(int port, int n) {
  std::vector<int> fds;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);  // completes in the background
    fds.push_back(fd);
  }
  return fds;
}

// How many of `fds` completed their connection (the server accepted them into its queue).
inline int established(const std::vector<int>& fds) {
  int n = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
      ++n;
  }
  return n;
}

}  // namespace slowpipe::runtime
