#pragma once
// How the own kernels' warpgroups share the registers of their CTA. A kernel launched with
// __launch_bounds__(threads, 1) gives every thread the same share at launch: 64K registers over the
// threads, rounded down to ptxas' granule of 8 (168 a thread at 384 threads). setmaxnreg then moves
// registers between warpgroups: a decrease gives registers back to the CTA's pool and an increase
// waits until the pool holds enough. An increase past what the decreases give back waits for ever
// (a producer at 32 and consumers at 240 on 384 threads lack 1024 registers: the kernel hangs).

namespace spattn::cuda::hopper {

/// Registers a thread of a CTA of `threads` threads holds at launch (one CTA per multiprocessor).
constexpr int launch_registers_per_thread(int threads) { return 65536 / threads / 8 * 8; }

/// Whether a producer warpgroup at `producer` registers a thread and `consumer_threads` consumer
/// threads at `consumer` fit in the registers their CTA was launched with, as setmaxnreg takes
/// them (multiples of 8 from 24 to 256).
constexpr bool register_split_fits(int producer, int consumer_threads, int consumer) {
  const auto settable = [](int registers) { return registers % 8 == 0 && registers >= 24 && registers <= 256; };
  const int threads = 128 + consumer_threads;
  return settable(producer) && settable(consumer) &&
         128 * producer + consumer_threads * consumer <= threads * launch_registers_per_thread(threads);
}

}  // namespace spattn::cuda::hopper
