#pragma once
// A TCP port free on this machine just now, for tests that start a rendezvous (MASTER_PORT): the
// kernel hands out an unused one for a socket bound to port 0, which is closed again at once. And
// the IPv4 socket addresses such tests bind and connect to.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spattn::test {

/// `host` (INADDR_LOOPBACK, INADDR_ANY, in host byte order) at `port`.
inline sockaddr_in ipv4_address(in_addr_t host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(host);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

inline int free_tcp_port() {
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = ipv4_address(INADDR_LOOPBACK, 0);
  bind(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  close(probe);
  return ntohs(address.sin_port);
}

}  // namespace spattn::test
