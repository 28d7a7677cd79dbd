"""`spattn run` in a job started without mpirun: N plain processes with torchrun's variables RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT form their ranks over oneCCL; bad variables fail with an
error naming the variable on the process that has them, and a rank that never comes ends in the
timeout error instead of a hang. Usage: python3 test_environment_launch.py PATH_TO_SPATTN."""

import os
import shutil
import socket
import subprocess
import sys
import time
import unittest

SPATTN = None
ONECCL_BUILT = False  # whether `spattn info` lists the oneccl communicator (set with SPATTN below)
TIMEOUT = 2  # SPATTN_TIMEOUT of the runs that wait for a rank that never comes
# One thread per rank on a 2-core machine; oneCCL's worker threads yield instead of spinning where
# ranks share cores, and ranks of one host meet in shared memory (README's oneCCL paragraph).
ENV = {name: value for name, value in os.environ.items()
       if name not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")}
ENV.update(OMP_NUM_THREADS="1", CCL_YIELD="sched_yield", FI_PROVIDER="shm", CCL_ATL_SHM="1",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(ranks, world_size, *arguments, variables=None):
    """Starts one process per entry of `ranks` (their RANK values) as torchrun would, with WORLD_SIZE
    `world_size` and a free MASTER_PORT on this host; `variables` (a dict per rank, or one for all)
    overrides or, with None values, removes variables. Returns [(returncode, stdout, stderr)]."""
    port = str(free_port())
    processes = []
    for index, rank in enumerate(ranks):
        environment = dict(ENV, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=port, SPATTN_TIMEOUT=str(TIMEOUT))
        overrides = variables[index] if isinstance(variables, list) else variables or {}
        for name, value in overrides.items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value
        processes.append(subprocess.Popen([SPATTN, *arguments], env=environment, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    outputs = [process.communicate(timeout=120) for process in processes]
    return [(process.returncode, *output) for process, output in zip(processes, outputs)]


class EnvironmentLaunch(unittest.TestCase):
    def setUp(self):
        if not ONECCL_BUILT:
            self.skipTest("this spattn has no oneccl transport")

    def run_checked(self, ranks, algorithm, *shape):
        results = launch(range(ranks), ranks, "run", "--algo", algorithm, "--transport", "oneccl", *shape,
                         "--causal", "--backward", "--check", "--threads", "1")
        for rank, (status, out, err) in enumerate(results):
            self.assertEqual(status, 0, "rank %d: %s%s" % (rank, out, err))
        self.assertIn("%s on %d ranks x 1 thread (cpu) over oneccl" % (algorithm, ranks), results[0][1])
        self.assertIn("check PASSED", results[0][1])
        self.assertEqual(results[1][1], "", "only rank 0 reports")

    def test_strategies_check_at_two_ranks(self):
        for algorithm in ("zigzag", "ulysses"):
            with self.subTest(algorithm=algorithm):
                self.run_checked(2, algorithm, "--seq", "96", "--heads", "4", "--kv-heads", "2", "--head-dim", "8")

    def test_strategies_check_at_three_ranks(self):
        # hamilton: one slot to every other rank; allgather: all-gather and reduce-scatter; usp: split.
        for algorithm in ("hamilton", "allgather", "usp"):
            with self.subTest(algorithm=algorithm):
                self.run_checked(3, algorithm, "--seq", "144", "--heads", "6", "--kv-heads", "3", "--head-dim", "8")

    def test_transport_auto_means_oneccl(self):
        results = launch(range(2), 2, "run", "--seq", "96", "--heads", "2", "--head-dim", "8")
        self.assertEqual([status for status, _, _ in results], [0, 0], results)
        self.assertIn("(cpu) over oneccl", results[0][1])

    def assert_every_process_says(self, results, message):
        for rank, (status, out, err) in enumerate(results):
            self.assertEqual(status, 1, "process %d: %s%s" % (rank, out, err))
            self.assertIn(message, err, "process %d" % rank)

    def test_missing_variables_are_named(self):
        for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
            with self.subTest(missing=name):
                results = launch([0], 2, "run", "--transport", "oneccl", variables={name: None})
                self.assert_every_process_says(results, "%s is not set; a job started without mpirun needs RANK, "
                                                        "WORLD_SIZE, MASTER_ADDR and MASTER_PORT" % name)

    def test_bad_values_name_the_variable_its_value_and_what_is_allowed(self):
        for name, value, message in (
                ("RANK", "2", "RANK='2' is not allowed; allowed: an integer 0..1 (WORLD_SIZE=2)"),
                ("RANK", "-1", "RANK='-1' is not allowed; allowed: an integer 0..1"),
                ("WORLD_SIZE", "two", "WORLD_SIZE='two' is not allowed; allowed: an integer 1.."),
                ("WORLD_SIZE", "0", "WORLD_SIZE='0' is not allowed"),
                ("MASTER_PORT", "70000", "MASTER_PORT='70000' is not allowed; allowed: an integer 1..65535"),
                ("MASTER_PORT", "29500x", "MASTER_PORT='29500x' is not allowed"),
                ("MASTER_ADDR", "no-such-host.invalid",
                 "MASTER_ADDR='no-such-host.invalid' does not resolve to an IPv4 address")):
            with self.subTest(name=name, value=value):
                started = time.monotonic()
                results = launch([1], 2, "run", "--transport", "oneccl", variables={name: value})
                self.assert_every_process_says(results, message)
                self.assertLess(time.monotonic() - started, TIMEOUT, "refused before any waiting")

    def test_the_process_with_the_bad_variable_says_so_and_the_others_time_out(self):
        results = launch([0, 1], 2, "run", "--transport", "oneccl", variables=[{}, {"RANK": "7"}])
        self.assertIn("rank 0 of 2 timed out after %d s waiting for rank 1 to connect to MASTER_ADDR:MASTER_PORT"
                      % TIMEOUT, results[0][2])
        self.assertIn("RANK='7' is not allowed", results[1][2])
        self.assertEqual([status for status, _, _ in results], [1, 1])

    def test_a_rank_zero_that_never_comes_is_a_timeout_not_a_hang(self):
        started = time.monotonic()
        results = launch([1, 2], 3, "run", "--transport", "oneccl")
        for rank, (status, _, err) in zip((1, 2), results):
            self.assertEqual(status, 1)
            self.assertRegex(err, r"rank %d of 3 timed out after %d s waiting for rank 0 to listen at "
                                  r"MASTER_ADDR:MASTER_PORT \(127\.0\.0\.1:\d+\)" % (rank, TIMEOUT))
        self.assertLess(time.monotonic() - started, TIMEOUT + 10)

    def test_ranks_that_never_come_are_named_by_rank_zero(self):
        results = launch([0], 3, "run", "--transport", "oneccl")
        self.assertEqual(results[0][0], 1)
        self.assertIn("rank 0 of 3 timed out after %d s waiting for ranks 1, 2 to connect" % TIMEOUT, results[0][2])

    def test_two_processes_with_one_rank_fail_on_every_process(self):
        results = launch([0, 1, 1], 3, "run", "--transport", "oneccl")
        self.assert_every_process_says(results, "two processes have RANK=1; allowed: each of 0..2 in exactly one "
                                                "process")

    def test_world_sizes_that_differ_fail_on_every_process(self):
        results = launch([0, 1], 2, "run", "--transport", "oneccl", variables=[{}, {"WORLD_SIZE": "3"}])
        self.assert_every_process_says(results, "the process with RANK=1 has WORLD_SIZE=3 but rank 0 has "
                                                "WORLD_SIZE=2; allowed: the same WORLD_SIZE in every process")

    def test_transports_that_need_mpi_are_refused_naming_what_works(self):
        for arguments in (("--transport", "mpi"), ("--device", "cuda")):
            with self.subTest(arguments=arguments):
                results = launch(range(2), 2, "run", *arguments)
                self.assert_every_process_says(results, "a job started without mpirun (WORLD_SIZE set, no MPI "
                                                        "launcher) forms its ranks over oneCCL only")

    def test_torchrun_starts_the_ranks(self):
        # torchrun's agent keeps its own store at MASTER_PORT: rank 0 listens at a free port above it.
        if shutil.which("torchrun") is None:
            self.skipTest("no torchrun here")
        result = subprocess.run(["torchrun", "--nproc-per-node", "2", "--no-python", SPATTN, "run", "--algo", "zigzag",
                                 "--causal", "--backward", "--check", "--seq", "96", "--heads", "2", "--head-dim", "8"],
                                env=ENV, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("zigzag on 2 ranks x 1 thread (cpu) over oneccl", result.stdout)
        self.assertIn("check PASSED", result.stdout)

    def test_under_mpirun_the_variables_are_left_to_mpi(self):
        result = subprocess.run(["mpirun", "--oversubscribe", "-x", "WORLD_SIZE", "-x", "RANK", "-np", "2", SPATTN,
                                 "run", "--seq", "96", "--heads", "2", "--head-dim", "8"],
                                env=dict(ENV, WORLD_SIZE="5", RANK="3"), capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("on 2 ranks x 1 thread (cpu) over mpi", result.stdout)


class WithoutOneccl(unittest.TestCase):
    def test_a_build_without_oneccl_refuses_clearly(self):
        if ONECCL_BUILT:
            self.skipTest("this spattn has the oneccl transport")
        results = launch([0], 1, "run")
        self.assertEqual(results[0][0], 1)
        self.assertIn("this build of spattn has no oneCCL", results[0][2])


if __name__ == "__main__":
    SPATTN = sys.argv.pop(1)
    ONECCL_BUILT = "oneccl" in subprocess.run([SPATTN, "info"], capture_output=True, text=True).stdout
    unittest.main(verbosity=2)
