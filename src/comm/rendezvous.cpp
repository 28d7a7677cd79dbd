#include "comm/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/timeout_message.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

using Clock = std::chrono::steady_clock;

// The first word of every greeting, both ways: a connection that does not start with it is no
// rank of ours.
constexpr std::uint32_t kGreetingMagic = 0x7370726eu;  // "sprn"

class Deadline {
 public:
  explicit Deadline(double seconds)
      : end_(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  bool passed() const { return Clock::now() >= end_; }
  // The earlier of this deadline and `seconds` from now.
  Deadline capped_at(double seconds) const {
    Deadline sooner(seconds);
    sooner.end_ = std::min(sooner.end_, end_);
    return sooner;
  }
  // For poll(): at least 0, at most the time left.
  int milliseconds_left() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - Clock::now()).count();
    return static_cast<int>(std::max<long long>(0, left));
  }

 private:
  Clock::time_point end_;
};

// A socket closed when it goes out of scope.
class Socket {
 public:
  explicit Socket(int descriptor = -1) : descriptor_(descriptor) {}
  Socket(Socket&& other) noexcept : descriptor_(other.descriptor_) { other.descriptor_ = -1; }
  Socket& operator=(Socket&& other) noexcept {
    std::swap(descriptor_, other.descriptor_);
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (descriptor_ >= 0) close(descriptor_);
  }
  int get() const { return descriptor_; }

 private:
  int descriptor_;
};

// Waits until `socket` is ready for `events` or the deadline passes; true when ready.
bool wait_ready(const Socket& socket, short events, const Deadline& deadline) {
  pollfd entry{socket.get(), events, 0};
  int ready = 0;
  do {
    ready = poll(&entry, 1, deadline.milliseconds_left());
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

// Moves all `bytes`, or returns false when the peer closed, failed, or the deadline passed.
bool send_all(const Socket& socket, const void* data, std::size_t bytes, const Deadline& deadline) {
  const char* next = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_ready(socket, POLLOUT, deadline)) return false;
    const ssize_t sent = send(socket.get(), next, bytes, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (sent <= 0) return false;
    next += sent;
    bytes -= static_cast<std::size_t>(sent);
  }
  return true;
}

bool receive_all(const Socket& socket, void* data, std::size_t bytes, const Deadline& deadline) {
  char* next = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_ready(socket, POLLIN, deadline)) return false;
    const ssize_t received = recv(socket.get(), next, bytes, 0);
    if (received < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (received <= 0) return false;
    next += received;
    bytes -= static_cast<std::size_t>(received);
  }
  return true;
}

// What rank 0 says first on every connection, in network byte order: a rank that hears anything
// else (another service, another job's rank 0 on a port beside this one's) looks further.
struct RankZeroHello {
  std::uint32_t magic;
  std::uint32_t master_port;
};

// What a rank tells rank 0 once it heard the hello, in network byte order.
struct Greeting {
  std::uint32_t magic;
  std::uint32_t rank;
  std::uint32_t world_size;
};

// What rank 0 answers: a status, then `length` bytes of root data or of the error's message.
struct AnswerHeader {
  std::uint32_t failed;
  std::uint32_t length;
};

// "MASTER_ADDR:MASTER_PORT+2 (host:45911)": `port`, one of those rank 0 may listen at.
std::string where(const LaunchEnvironment& launch, int port) {
  const int above = port - launch.master_port;
  return "MASTER_ADDR:MASTER_PORT" + (above == 0 ? std::string() : "+" + std::to_string(above)) + " (" +
         launch.master_addr + ":" + std::to_string(port) + ")";
}

// Every port rank 0 may listen at: "MASTER_ADDR:MASTER_PORT+1..+16 (host:45910..45925)".
std::string where_rank_zero_may_listen(const LaunchEnvironment& launch) {
  const int first = launch.first_rendezvous_port;
  const int last = first + launch.rendezvous_port_count - 1;
  if (first == last) return where(launch, first);
  return "MASTER_ADDR:MASTER_PORT+" + std::to_string(first - launch.master_port) + "..+" +
         std::to_string(last - launch.master_port) + " (" + launch.master_addr + ":" + std::to_string(first) + ".." +
         std::to_string(last) + ")";
}

// MASTER_ADDR as an IPv4 socket address, its port left to the caller.
sockaddr_in master_address(const LaunchEnvironment& launch) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(launch.master_addr.c_str(), nullptr, &hints, &found);
  SPATTN_CHECK(status == 0, "MASTER_ADDR='" << launch.master_addr << "' does not resolve to an IPv4 address ("
                                            << gai_strerror(status)
                                            << "); allowed: a host name or IPv4 address of rank 0's machine");
  sockaddr_in address{};
  std::memcpy(&address, found->ai_addr, sizeof address);
  freeaddrinfo(found);
  return address;
}

// Rank 0's listening socket, at the first free port of those it may listen at, which it writes to `port`.
Socket listen_for_ranks(const LaunchEnvironment& launch, int& port) {
  const int last = launch.first_rendezvous_port + launch.rendezvous_port_count - 1;
  for (port = launch.first_rendezvous_port;; ++port) {
    Socket listener(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    SPATTN_CHECK(listener.get() >= 0, "rank 0 cannot open a socket: " << std::strerror(errno));
    // A port that an earlier job on this machine just closed is free again at once.
    const int reuse = 1;
    setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
    // Every interface, as torchrun's store does: MASTER_ADDR may name any of this machine's addresses.
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    any.sin_port = htons(static_cast<std::uint16_t>(port));
    if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any) == 0 &&
        listen(listener.get(), launch.world_size) == 0)
      return listener;
    const int failure = errno;
    SPATTN_CHECK(failure == EADDRINUSE && port < last,
                 "rank 0 cannot listen at "
                     << where_rank_zero_may_listen(launch) << " (" << std::strerror(failure) << "); allowed: "
                     << (launch.rendezvous_port_count == 1
                             ? "a TCP port free on rank 0's machine"
                             : "a MASTER_PORT with a free TCP port among the " +
                                   std::to_string(launch.rendezvous_port_count) + " above it on rank 0's machine"));
  }
}

// "ranks 2, 3" (or "rank 2") of those not yet arrived.
std::string missing_ranks(const std::vector<bool>& arrived) {
  std::vector<int> missing;
  for (std::size_t rank = 0; rank < arrived.size(); ++rank)
    if (!arrived[rank]) missing.push_back(static_cast<int>(rank));
  std::ostringstream text;
  text << (missing.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < missing.size(); ++i) text << (i ? ", " : "") << missing[i];
  return text.str();
}

std::string serve_as_rank_zero(const LaunchEnvironment& launch, const std::string& root_data, double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  int port = 0;
  const Socket listener = listen_for_ranks(launch, port);
  const RankZeroHello hello{htonl(kGreetingMagic), htonl(static_cast<std::uint32_t>(launch.master_port))};
  std::vector<Socket> ranks;
  std::vector<bool> arrived(static_cast<std::size_t>(launch.world_size), false);
  arrived[0] = true;
  std::string error;
  for (int awaited = launch.world_size - 1; awaited > 0 && error.empty();) {
    if (!wait_ready(listener, POLLIN, deadline)) break;
    Socket connection(accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK));
    Greeting greeting{};
    if (connection.get() < 0 || !send_all(connection, &hello, sizeof hello, deadline) ||
        !receive_all(connection, &greeting, sizeof greeting, deadline) || ntohl(greeting.magic) != kGreetingMagic)
      continue;  // not one of ours, or gone already
    const auto rank = static_cast<int>(ntohl(greeting.rank));
    const auto world_size = static_cast<int>(ntohl(greeting.world_size));
    if (world_size != launch.world_size) {
      error = "the process with RANK=" + std::to_string(rank) + " has WORLD_SIZE=" + std::to_string(world_size) +
              " but rank 0 has WORLD_SIZE=" + std::to_string(launch.world_size) +
              "; allowed: the same WORLD_SIZE in every process";
    } else if (rank <= 0 || rank >= launch.world_size || arrived[static_cast<std::size_t>(rank)]) {
      error = "two processes have RANK=" + std::to_string(rank) + "; allowed: each of 0.." +
              std::to_string(launch.world_size - 1) + " in exactly one process";
    } else {
      arrived[static_cast<std::size_t>(rank)] = true;
      --awaited;
    }
    ranks.push_back(std::move(connection));
  }
  const bool timed_out = error.empty() && !std::all_of(arrived.begin(), arrived.end(), [](bool came) { return came; });
  if (timed_out)
    error = timeout_message(describe_rank(0, launch.world_size), timeout_seconds,
                            missing_ranks(arrived) + " to connect to " + where(launch, port));
  const std::string& answer = error.empty() ? root_data : error;
  const AnswerHeader header{htonl(error.empty() ? 0u : 1u), htonl(static_cast<std::uint32_t>(answer.size()))};
  // The answers get a deadline of their own: the ranks that came wait for them, even after a timeout.
  const Deadline answering(timeout_seconds);
  for (const Socket& rank : ranks)
    if (send_all(rank, &header, sizeof header, answering)) send_all(rank, answer.data(), answer.size(), answering);
  if (timed_out) detail::throw_timeout_error(error);
  SPATTN_CHECK(error.empty(), error);
  return root_data;
}

// A connection to `address`; an unconnected socket when nobody listens there or the deadline passes.
Socket connect_to(const sockaddr_in& address, const Deadline& deadline) {
  Socket connection(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  SPATTN_CHECK(connection.get() >= 0, "cannot open a socket: " << std::strerror(errno));
  if (connect(connection.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return connection;
  if (errno == EINPROGRESS && wait_ready(connection, POLLOUT, deadline)) {
    int failure = 0;
    socklen_t length = sizeof failure;
    getsockopt(connection.get(), SOL_SOCKET, SO_ERROR, &failure, &length);
    if (failure == 0) return connection;
  }
  return Socket();
}

// A connection to this job's rank 0, which said hello on it: tries the ports rank 0 may listen at
// in turn, over and over while nobody answers yet, and writes the one that answered to `port`; an
// unconnected socket at the deadline.
Socket find_rank_zero(const LaunchEnvironment& launch, const Deadline& deadline, int& port) {
  constexpr auto kRetryPause = std::chrono::milliseconds(50);
  // Rank 0 says hello as it accepts; a listener silent for this long is not rank 0.
  constexpr double kHelloSeconds = 1.0;
  const int end = launch.first_rendezvous_port + launch.rendezvous_port_count;
  sockaddr_in address = master_address(launch);
  while (!deadline.passed()) {
    for (port = launch.first_rendezvous_port; port < end && !deadline.passed(); ++port) {
      address.sin_port = htons(static_cast<std::uint16_t>(port));
      Socket connection = connect_to(address, deadline);
      RankZeroHello hello{};
      if (connection.get() >= 0 && receive_all(connection, &hello, sizeof hello, deadline.capped_at(kHelloSeconds)) &&
          ntohl(hello.magic) == kGreetingMagic && static_cast<int>(ntohl(hello.master_port)) == launch.master_port)
        return connection;
    }
    std::this_thread::sleep_for(kRetryPause);
  }
  return Socket();
}

std::string join_rank_zero(const LaunchEnvironment& launch, double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  const std::string me = describe_rank(launch.rank, launch.world_size);
  int port = 0;
  const Socket connection = find_rank_zero(launch, deadline, port);
  if (connection.get() < 0)
    detail::throw_timeout_error(
        timeout_message(me, timeout_seconds, "rank 0 to listen at " + where_rank_zero_may_listen(launch)));
  const Greeting greeting{htonl(kGreetingMagic), htonl(static_cast<std::uint32_t>(launch.rank)),
                          htonl(static_cast<std::uint32_t>(launch.world_size))};
  // Rank 0 answers within the timeout from when it began to listen, which was before this rank
  // connected; its answer may be its own timeout error, sent as that timeout ends, so this rank
  // waits a moment longer than the timeout from now for it.
  constexpr double kAnswerTransitSeconds = 1.0;
  const Deadline answered_by(timeout_seconds + kAnswerTransitSeconds);
  AnswerHeader header{};
  std::string answer;
  bool answered = send_all(connection, &greeting, sizeof greeting, answered_by) &&
                  receive_all(connection, &header, sizeof header, answered_by);
  if (answered) {
    answer.resize(ntohl(header.length));
    answered = receive_all(connection, answer.data(), answer.size(), answered_by);
  }
  if (!answered)
    detail::throw_timeout_error(timeout_message(
        me, timeout_seconds, "rank 0 at " + where(launch, port) + " to answer (it answers once every rank has come)"));
  SPATTN_CHECK(ntohl(header.failed) == 0, answer);
  return answer;
}

}  // namespace

std::string share_from_rank_zero(const LaunchEnvironment& launch, const std::string& root_data,
                                 double timeout_seconds) {
  if (launch.rank == 0) {
    master_address(launch);  // the same verdict on MASTER_ADDR on every rank
    return serve_as_rank_zero(launch, root_data, timeout_seconds);
  }
  return join_rank_zero(launch, timeout_seconds);
}

}  // namespace spattn
