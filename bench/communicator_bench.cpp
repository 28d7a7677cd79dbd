// The host communicators against each other (MPI, and oneCCL where it was built), timing what one
// step of a strategy exchanges:
//   ring        each rank sends --bytes to rank+1 and receives as many from rank-1, in one batch
//               (ring attention's KV rotation);
//   all_to_all  each rank's --bytes cut into one block per rank, block i to rank i (Ulysses).
//
//   mpirun -np N spattn_communicator_bench [--transports mpi,oneccl] [--bytes 4096,65536,1048576,16777216]
//       [--warmup 5] [--iters 50] [--csv PATH]
//
// Each iteration starts after an MPI barrier and ends when the transfer's wait returns; its time is
// the slowest rank's, and a row gives the median of those over --iters after --warmup. GB/s: the
// bytes a rank sends to other ranks (ring: --bytes; all_to_all: the ranks-1 blocks not its own)
// over that time. Before the timing, one exchange's received data is checked word by word; a wrong
// word on any rank ends the run with exit status 1. The CSV gets the columns
// transport,pattern,ranks,bytes,median_us,gbps, one row per configuration, appended.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "spattn/error.hpp"
#include "spattn/mpi_communicator.hpp"
#ifdef SPATTN_WITH_ONECCL
#include "spattn/oneccl_communicator.hpp"
#endif

namespace spattn {
namespace {

struct BenchOptions {
  std::vector<std::string> transports = {"mpi", "oneccl"};
  std::vector<int64_t> bytes = {4096, 65536, 1048576, 16777216};
  int warmup = 5;
  int iterations = 50;
  std::string csv;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions options;
#ifndef SPATTN_WITH_ONECCL
  options.transports = {"mpi"};
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      SPATTN_CHECK(i + 1 < argc, "missing value after " << flag);
      return argv[++i];
    };
    if (flag == "--transports") {
      options.transports = split_list(value());
      for (const std::string& name : options.transports)
        SPATTN_CHECK(name == "mpi" || name == "oneccl", "--transports expects mpi or oneccl, got '" << name << "'");
    } else if (flag == "--bytes") {
      options.bytes = parse_counts(flag, value());
    } else if (flag == "--warmup") {
      options.warmup = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--iters") {
      options.iterations = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--csv") {
      options.csv = value();
    } else {
      SPATTN_FAIL("unknown option '" << flag << "'; see the comment at the top of bench/communicator_bench.cpp");
    }
  }
  return options;
}

/// One exchange to time: the buffers of one rank and what its peers must have sent into them.
struct Exchange {
  std::string pattern;                // "ring" or "all_to_all"
  std::size_t bytes_per_message = 0;  // ring: the whole buffer; all_to_all: one rank's block
  std::size_t bytes_to_others = 0;    // what this rank sends to other ranks, for GB/s
  std::vector<uint32_t> send;         // (words)
  std::vector<uint32_t> receive;      // (words)
  std::vector<uint32_t> expected;     // (words) what receive holds after the exchange
};

/// The word that rank `from` sends to rank `to` at position `index` of their message.
uint32_t word_sent(int from, int to, std::size_t index) {
  return static_cast<uint32_t>(from) * 2654435761u ^ static_cast<uint32_t>(to) * 40503u ^ static_cast<uint32_t>(index);
}

Exchange make_exchange(const std::string& pattern, std::size_t bytes, int me, int ranks) {
  Exchange exchange;
  exchange.pattern = pattern;
  if (pattern == "ring") {
    const int next = (me + 1) % ranks, previous = (me + ranks - 1) % ranks;
    const std::size_t words = bytes / sizeof(uint32_t);
    exchange.bytes_per_message = words * sizeof(uint32_t);
    exchange.bytes_to_others = exchange.bytes_per_message;
    for (std::size_t i = 0; i < words; ++i) {
      exchange.send.push_back(word_sent(me, next, i));
      exchange.expected.push_back(word_sent(previous, me, i));
    }
  } else {
    // The same total bytes as the ring's buffer, cut into one block per rank (rounded down to words).
    const std::size_t words_per_rank = bytes / sizeof(uint32_t) / static_cast<std::size_t>(ranks);
    exchange.bytes_per_message = words_per_rank * sizeof(uint32_t);
    exchange.bytes_to_others = exchange.bytes_per_message * static_cast<std::size_t>(ranks - 1);
    for (int peer = 0; peer < ranks; ++peer)
      for (std::size_t i = 0; i < words_per_rank; ++i) {
        exchange.send.push_back(word_sent(me, peer, i));
        exchange.expected.push_back(word_sent(peer, me, i));
      }
  }
  exchange.receive.assign(exchange.expected.size(), 0xdeadbeefu);
  return exchange;
}

/// One exchange over `communicator`, started and waited on.
void run_exchange(Communicator& communicator, Exchange& exchange) {
  const int me = communicator.rank(), ranks = communicator.size();
  std::unique_ptr<PendingTransfer> transfer;
  if (exchange.pattern == "ring") {
    TransferBatch batch;
    batch.sends = {{exchange.send.data(), exchange.bytes_per_message, (me + 1) % ranks}};
    batch.receives = {{exchange.receive.data(), exchange.bytes_per_message, (me + ranks - 1) % ranks}};
    transfer = communicator.start(batch);
  } else {
    transfer = communicator.start_all_to_all(exchange.send.data(), exchange.receive.data(), exchange.bytes_per_message);
  }
  communicator.wait(*transfer);
}

struct Row {
  std::string transport;
  std::string pattern;
  int ranks = 0;
  int64_t bytes = 0;
  double median_us = 0;
  double gbps = 0;
};

/// Runs one exchange and checks its received words on every rank: the lowest rank that received
/// wrong data, or -1 when every rank got what was sent.
int first_rank_with_wrong_data(MpiCommunicator& world, Communicator& communicator, Exchange& exchange) {
  run_exchange(communicator, exchange);
  const int wrong = exchange.receive == exchange.expected ? 0 : 1;
  std::vector<int> wrong_by_rank(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&wrong, wrong_by_rank.data(), sizeof(int));
  const auto first = std::find(wrong_by_rank.begin(), wrong_by_rank.end(), 1);
  return first == wrong_by_rank.end() ? -1 : static_cast<int>(first - wrong_by_rank.begin());
}

/// The median over iterations of the slowest rank's time, in microseconds.
double median_of_slowest_us(MpiCommunicator& world, const std::vector<double>& my_us) {
  const std::size_t iterations = my_us.size();
  std::vector<double> all_us(iterations * static_cast<std::size_t>(world.size()));
  world.host_all_gather(my_us.data(), all_us.data(), iterations * sizeof(double));
  std::vector<double> slowest(iterations, 0.0);
  for (std::size_t rank = 0; rank < static_cast<std::size_t>(world.size()); ++rank)
    for (std::size_t i = 0; i < iterations; ++i) slowest[i] = std::max(slowest[i], all_us[rank * iterations + i]);
  std::sort(slowest.begin(), slowest.end());
  return iterations % 2 ? slowest[iterations / 2] : 0.5 * (slowest[iterations / 2 - 1] + slowest[iterations / 2]);
}

/// Every pattern and size over one transport; returns false when an exchange delivered wrong data.
bool bench_transport(const BenchOptions& options, MpiCommunicator& world, Communicator& communicator,
                     const std::string& transport, std::vector<Row>& rows) {
  for (const std::string pattern : {"ring", "all_to_all"}) {
    for (const int64_t bytes : options.bytes) {
      Exchange exchange = make_exchange(pattern, static_cast<std::size_t>(bytes), world.rank(), world.size());
      const int wrong_rank = first_rank_with_wrong_data(world, communicator, exchange);
      if (wrong_rank >= 0) {
        if (world.rank() == 0)
          std::fprintf(stderr, "%s %s at %lld bytes: rank %d received wrong data\n", transport.c_str(), pattern.c_str(),
                       static_cast<long long>(bytes), wrong_rank);
        return false;
      }
      for (int i = 0; i < options.warmup; ++i) run_exchange(communicator, exchange);
      std::vector<double> my_us;
      for (int i = 0; i < options.iterations; ++i) {
        world.barrier();
        const auto begin = std::chrono::steady_clock::now();
        run_exchange(communicator, exchange);
        const auto end = std::chrono::steady_clock::now();
        my_us.push_back(std::chrono::duration<double, std::micro>(end - begin).count());
      }
      Row row{transport, pattern, world.size(), bytes, median_of_slowest_us(world, my_us), 0.0};
      row.gbps = static_cast<double>(exchange.bytes_to_others) / (row.median_us * 1e3);  // bytes/us/1e3 = GB/s
      rows.push_back(row);
      if (world.rank() == 0)
        std::printf("%-8s %-11s %5d %10lld %12.1f %8.3f\n", row.transport.c_str(), row.pattern.c_str(), row.ranks,
                    static_cast<long long>(row.bytes), row.median_us, row.gbps);
      std::fflush(stdout);
    }
  }
  return true;
}

void append_csv(const std::string& path, const std::vector<Row>& rows) {
  const bool has_header = std::ifstream(path).peek() != std::ifstream::traits_type::eof();
  std::ofstream csv(path, std::ios::app);
  SPATTN_CHECK(csv.good(), "cannot write --csv " << path);
  if (!has_header) csv << "transport,pattern,ranks,bytes,median_us,gbps\n";
  for (const Row& row : rows)
    csv << row.transport << "," << row.pattern << "," << row.ranks << "," << row.bytes << "," << row.median_us << ","
        << row.gbps << "\n";
}

int run(int argc, char** argv) {
  const BenchOptions options = parse(argc, argv);
  MpiCommunicator world;
  if (world.rank() == 0)
    std::printf("%-8s %-11s %5s %10s %12s %8s\n", "transport", "pattern", "ranks", "bytes", "median_us", "GB/s");
  std::vector<Row> rows;
  for (const std::string& transport : options.transports) {
    bool correct = true;
    if (transport == "mpi") {
      correct = bench_transport(options, world, world, transport, rows);
    } else {
#ifdef SPATTN_WITH_ONECCL
      OnecclCommunicator oneccl(world);
      correct = bench_transport(options, world, oneccl, transport, rows);
#else
      SPATTN_FAIL("--transports oneccl: this build has no oneCCL communicator (CMake SPATTN_ONECCL)");
#endif
    }
    if (!correct) return 1;
  }
  if (world.rank() == 0 && !options.csv.empty()) append_csv(options.csv, rows);
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) {
  try {
    return spattn::run(argc, argv);
  } catch (const spattn::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
