"""End-to-end tests of the `spattn` program under mpirun: .npy inputs and outputs checked against
an independent fp64 attention written here in plain Python, and the exit status and message of
bad input. Usage: python3 test_cli.py PATH_TO_SPATTN (standard library only)."""

import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import unittest

SPATTN = None
ONECCL_BUILT = False  # whether `spattn info` lists the oneccl communicator (set with SPATTN below)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")


def write_npy(path, values, shape, descr="<f4"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % s for s in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    code = "<" + ("f" if descr == "<f4" else "e") * len(values)
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(code, *values))


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    header_length = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + header_length].decode()
    assert "'<f4'" in header, header
    shape = tuple(int(s) for s in header.split("(")[1].split(")")[0].split(",") if s.strip())
    count = math.prod(shape)
    return list(struct.unpack("<%df" % count, data[10 + header_length:])), shape


def round_half(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def reference(q, k, v, B, S, H, HK, D, causal, documents=None):
    """out (B, S, H, D) and lse (B, H, S) in fp64, the textbook way; with `documents` (lengths
    packed one after another) a query sees only its own document."""
    document_of = [index for index, length in enumerate(documents or [S]) for _ in range(length)]
    out = [0.0] * (B * S * H * D)
    lse = [0.0] * (B * H * S)
    scale = 1 / math.sqrt(D)
    for b in range(B):
        for h in range(H):
            g = h // (H // HK)
            for i in range(S):
                keys = [j for j in range(S) if (not causal or j <= i) and document_of[j] == document_of[i]]
                scores = [scale * sum(q[((b * S + i) * H + h) * D + d] * k[((b * S + j) * HK + g) * D + d]
                                      for d in range(D)) for j in keys]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                lse[(b * H + h) * S + i] = top + math.log(total)
                for d in range(D):
                    out[((b * S + i) * H + h) * D + d] = sum(
                        w * v[((b * S + j) * HK + g) * D + d] for w, j in zip(weights, keys)) / total
    return out, lse


def spattn(ranks, *arguments, environment=None, launcher_options=()):
    """`mpirun -np ranks spattn arguments`, with `environment` exported to every rank."""
    exported = [option for name in (environment or {}) for option in ("-x", name)]
    command = ["mpirun", "--oversubscribe", *launcher_options, *exported, "-np", str(ranks), SPATTN, *arguments]
    return subprocess.run(command, capture_output=True, text=True, env=dict(ENV, **(environment or {})), timeout=300)


KERNEL_BENCH_HEADER = "kernel,pass,causal,seq,head_dim,heads,kv_heads,dtype,ms,tflops"  # bench/kernel_bench.cpp's CSV
GPU_BENCH_HEADER = ("implementation,algorithm,gpus,device,batch,heads,kv_heads,head_dim,tokens_per_gpu,causal,dtype,"
                    "pass,ms,tflops_per_gpu,ideal_tflops,percent_of_ideal,peak_memory_mib")  # gpu_attention_bench.cpp's


def run_bench_script(script, *arguments):
    """stdout of bench/`script` with `arguments`."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", script)
    return subprocess.run([sys.executable, path, *arguments], capture_output=True, text=True, check=True).stdout


def bench_script_output(script, csv_rows, header=KERNEL_BENCH_HEADER):
    """stdout of bench/`script` given one CSV per entry of `csv_rows` (a file name: its lines after
    `header`)."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for name, rows in csv_rows.items():
            paths.append(os.path.join(directory, name))
            with open(paths[-1], "w") as f:
                f.write(header + "\n")
                f.writelines(row + "\n" for row in rows)
        return run_bench_script(script, *paths)


class NpyInputsAndOutputs(unittest.TestCase):
    B, S, H, HK, D = 2, 24, 4, 2, 8

    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.inputs = os.path.join(self.directory.name, "inputs")
        self.outputs = os.path.join(self.directory.name, "outputs")
        os.makedirs(self.inputs)
        rng = random.Random(7)
        B, S, H, HK, D = self.B, self.S, self.H, self.HK, self.D
        self.q = [rng.gauss(0, 1) for _ in range(B * S * H * D)]
        self.k = [round_half(rng.gauss(0, 1)) for _ in range(B * S * HK * D)]  # stored as float16
        self.v = [rng.gauss(0, 1) for _ in range(B * S * HK * D)]
        self.dout = [rng.gauss(0, 1) for _ in range(B * S * H * D)]
        write_npy(os.path.join(self.inputs, "q.npy"), self.q, (B, S, H, D))
        write_npy(os.path.join(self.inputs, "k.npy"), self.k, (B, S, HK, D), descr="<f2")
        write_npy(os.path.join(self.inputs, "v.npy"), self.v, (B, S, HK, D))
        write_npy(os.path.join(self.inputs, "dout.npy"), self.dout, (B, S, H, D))

    def tearDown(self):
        self.directory.cleanup()

    def test_zigzag_and_stripe_outputs_match_an_independent_reference(self):
        # --inputs and --outputs hold the whole sequence in order, whatever the layout's shards.
        for algorithm in ("zigzag", "stripe"):
            with self.subTest(algorithm=algorithm):
                result = spattn(3, "run", "--algo", algorithm, "--causal", "--backward", "--check", "--inputs",
                                self.inputs, "--outputs", self.outputs, "--json")
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                self.assertIn('"check": "pass"', result.stdout.strip().splitlines()[-1])
                B, S, H, HK, D = self.B, self.S, self.H, self.HK, self.D
                expected_out, expected_lse = reference(self.q, self.k, self.v, B, S, H, HK, D, causal=True)
                out, out_shape = read_npy(os.path.join(self.outputs, "out.npy"))
                lse, lse_shape = read_npy(os.path.join(self.outputs, "lse.npy"))
                self.assertEqual(out_shape, (B, S, H, D))
                self.assertEqual(lse_shape, (B, H, S))
                self.assertLess(max(abs(a - b) for a, b in zip(out, expected_out)), 1e-5)
                self.assertLess(max(abs(a - b) for a, b in zip(lse, expected_lse)), 1e-5)
                for name, shape in (("dq", (B, S, H, D)), ("dk", (B, S, HK, D)), ("dv", (B, S, HK, D))):
                    values, found = read_npy(os.path.join(self.outputs, name + ".npy"))
                    self.assertEqual(found, shape)
                    self.assertTrue(all(math.isfinite(x) for x in values))

    def test_packed_documents_match_an_independent_reference(self):
        documents = [5, 11, 1, 7]  # 24 tokens, padded to 36 for zigzag per document over 3 ranks
        result = spattn(3, "run", "--algo", "hamilton", "--causal", "--backward", "--check", "--doc-lens",
                        ",".join(map(str, documents)), "--inputs", self.inputs, "--outputs", self.outputs, "--json")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual(report["check"], "pass")
        self.assertEqual(report["documents"], {"lengths": documents, "padding": 12, "split": "per_document"})
        B, S, H, HK, D = self.B, self.S, self.H, self.HK, self.D
        expected_out, expected_lse = reference(self.q, self.k, self.v, B, S, H, HK, D, causal=True,
                                               documents=documents)
        out, out_shape = read_npy(os.path.join(self.outputs, "out.npy"))
        lse, lse_shape = read_npy(os.path.join(self.outputs, "lse.npy"))
        self.assertEqual((out_shape, lse_shape), ((B, S, H, D), (B, H, S)))
        self.assertLess(max(abs(a - b) for a, b in zip(out, expected_out)), 1e-5)
        self.assertLess(max(abs(a - b) for a, b in zip(lse, expected_lse)), 1e-5)

    def test_whole_sequence_documents_match_an_independent_reference(self):
        documents = [5, 11, 1, 7]  # 24 tokens: stretches of 8 over 3 ranks cut documents 1 and 3
        result = spattn(3, "run", "--algo", "allgather", "--causal", "--backward", "--check", "--doc-lens",
                        ",".join(map(str, documents)), "--doc-split", "whole_sequence", "--inputs", self.inputs,
                        "--outputs", self.outputs, "--json")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertEqual(report["check"], "pass")
        self.assertEqual(report["documents"], {"lengths": documents, "padding": 0, "split": "whole_sequence"})
        B, S, H, HK, D = self.B, self.S, self.H, self.HK, self.D
        expected_out, _ = reference(self.q, self.k, self.v, B, S, H, HK, D, causal=True, documents=documents)
        out, _ = read_npy(os.path.join(self.outputs, "out.npy"))
        self.assertLess(max(abs(a - b) for a, b in zip(out, expected_out)), 1e-5)
        refused = spattn(2, "run", "--algo", "zigzag", "--doc-lens", "5,7", "--doc-split", "whole_sequence")
        self.assertEqual(refused.returncode, 1)
        self.assertIn("document_split whole_sequence (Llama 3's context parallelism) is all-gather's alone",
                      refused.stdout + refused.stderr)

    def test_documents_that_do_not_fill_the_inputs_are_refused(self):
        result = spattn(2, "run", "--doc-lens", "5,5", "--inputs", self.inputs)
        self.assertEqual(result.returncode, 1)
        self.assertIn("--doc-lens with q.npy (2, 24, 4, 8): the 2 documents have 10 tokens; the sequence has 24",
                      result.stderr)

    def test_input_of_the_wrong_shape_is_refused_on_every_rank(self):
        write_npy(os.path.join(self.inputs, "v.npy"), self.v[:len(self.v) // 2], (self.B, self.S // 2, self.HK, self.D))
        result = spattn(2, "run", "--inputs", self.inputs)
        self.assertEqual(result.returncode, 1)
        self.assertIn("v.npy has shape (2, 12, 2, 8); expected (2, 24, 2, 8)", result.stderr)

    def test_corrupt_input_is_refused(self):
        with open(os.path.join(self.inputs, "q.npy"), "wb") as f:
            f.write(b"\x93NUMPY\x01\x00garbage")
        result = spattn(2, "run", "--inputs", self.inputs)
        self.assertEqual(result.returncode, 1)
        self.assertIn("q.npy", result.stderr)


class ExitStatus(unittest.TestCase):
    def test_unknown_option_is_a_usage_error(self):
        result = spattn(2, "run", "--frobnicate")
        self.assertEqual(result.returncode, 2)
        self.assertIn("unknown option '--frobnicate'", result.stderr)

    def test_unknown_algorithm_names_the_allowed_ones(self):
        result = spattn(1, "run", "--algo", "spiral")
        self.assertEqual(result.returncode, 2)
        self.assertIn("allowed: ring, zigzag, stripe, ulysses, hamilton, hamilton2, allgather, usp, auto", result.stderr)

    def test_auto_runs_the_strategy_the_cost_model_ranks_first(self):
        # 3 ranks, 8 heads: no Ulysses (heads do not split), so the balanced zigzag or hamilton
        # under the causal mask; the report names the choice and the model's times, and it runs
        # and passes the check like a named strategy.
        result = spattn(3, "run", "--algo", "auto", "--causal", "--seq", "1536", "--backward", "--check", "--json")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        report = json.loads(result.stdout.strip().splitlines()[-1])
        self.assertIn(report["algo"], ("zigzag", "hamilton", "allgather"))
        self.assertIn("auto: the cost model's fastest forward+backward on cpu (1 node)", report["selection"])
        self.assertIn("*" + report["algo"] + " ", report["selection"])
        self.assertEqual(report["check"], "pass")
        self.assert_least_modelled(report)
        # A sliding window: every strategy's modelled time falls (its attention shrinks).
        result = spattn(2, "run", "--algo", "auto", "--causal", "--window", "64,0", "--seq", "4096", "--json")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        windowed = json.loads(result.stdout.strip().splitlines()[-1])
        self.assert_least_modelled(windowed)
        result = spattn(2, "run", "--algo", "auto", "--causal", "--seq", "4096", "--json")
        plain = json.loads(result.stdout.strip().splitlines()[-1])
        for algorithm, seconds in self.modelled(windowed).items():
            self.assertLess(seconds, self.modelled(plain)[algorithm], algorithm)
        # One rank: local attention; a named --preset is a usage error when unknown.
        result = spattn(1, "run", "--algo", "auto", "--json")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn('"selection": "auto: 1 rank, local attention"', result.stdout)
        result = spattn(1, "run", "--algo", "auto", "--preset", "dgx")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--preset expects one of nvswitch, h100-nvswitch, h200-nvswitch, mesh, pcie, cpu, got 'dgx'", result.stderr)

    @staticmethod
    def modelled(report):
        """{algorithm: modelled ms} from the report's selection line ('; *zigzag 1.234 ms; ...')."""
        times = {}
        for part in report["selection"].split("; ")[1:]:
            name, milliseconds, _ = part.split(" ")
            times[name.lstrip("*")] = float(milliseconds)
        return times

    def assert_least_modelled(self, report):
        times = self.modelled(report)
        self.assertEqual(times[report["algo"]], min(times.values()), report["selection"])

    def test_auto_with_no_runnable_strategy_says_why_for_each(self):
        result = spattn(2, "run", "--algo", "auto", "--seq", "7")
        self.assertEqual(result.returncode, 1)
        self.assertIn("no strategy runs this case; ring:", result.stderr)

    def test_indivisible_sequence_names_nearest_valid_lengths(self):
        result = spattn(3, "run", "--algo", "zigzag", "--seq", "100")
        self.assertEqual(result.returncode, 1)
        self.assertIn("nearest valid lengths: 96 or 102", result.stderr)

    def test_ring_check_passes_at_odd_rank_count_with_gqa_and_window(self):
        result = spattn(5, "run", "--algo", "ring", "--seq", "80", "--heads", "4", "--kv-heads", "1",
                        "--head-dim", "32", "--window", "7,3", "--backward", "--check", "--dtype", "bf16")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("check PASSED", result.stdout)

    def test_info_lists_the_backends(self):
        result = spattn(1, "info", "--json")
        self.assertEqual(result.returncode, 0)
        self.assertIn('"kernel_backends": ["cpu"', result.stdout)
        self.assertIn('"devices": ["cpu"', result.stdout)

    def test_info_lists_the_block_kernels_and_what_each_supports(self):
        info = json.loads(spattn(1, "info", "--json").stdout.strip().splitlines()[-1])
        names = [kernels["name"] for kernels in info["block_kernels"]]
        self.assertEqual(names[0], "cpu")
        self.assertIn("head dim 1 to 256", info["block_kernels"][0]["supports"])
        if any(backend.startswith("cuda") for backend in info["kernel_backends"]):
            self.assertEqual(names[1:], ["own (Hopper sm_90)", "cudnn"])
            self.assertIn("; backward: ", info["block_kernels"][1]["supports"])
            self.assertIn("dq, dk, dv added in fp32", info["block_kernels"][1]["supports"])
        text = spattn(1, "info").stdout
        self.assertIn("block kernels:   cpu: fp32, fp16, bf16", text)

    def test_kernel_names_are_checked_and_the_cpu_takes_only_auto(self):
        result = spattn(1, "run", "--kernel", "fastest")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--kernel: unknown kernel 'fastest'; allowed: auto, own, cudnn", result.stderr)
        for kernel in ("own", "cudnn"):
            result = spattn(1, "run", "--device", "cpu", "--kernel", kernel)
            self.assertEqual(result.returncode, 2)
            self.assertIn("--kernel %s with --device cpu: kernel %s names CUDA kernels" % (kernel, kernel),
                          result.stderr)
            self.assertIn("allowed there: auto", result.stderr)
        result = spattn(2, "run", "--kernel", "auto", "--seq", "64", "--heads", "2", "--head-dim", "8", "--json")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn('"kernel": "auto"', result.stdout.strip().splitlines()[-1])

    def test_help_documents_the_kernel_choice(self):
        result = spattn(1, "help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--kernel NAME", result.stdout)


class OnecclTransport(unittest.TestCase):
    """`--transport oneccl`: the CPU ranks exchange over oneCCL; every strategy matches the fp64
    reference, forward and backward, as over MPI."""

    def test_every_strategy_checks_over_oneccl_at_three_ranks(self):
        if not ONECCL_BUILT:
            self.skipTest("this spattn has no oneccl transport")
        for algorithm, heads in (("ring", 4), ("zigzag", 4), ("stripe", 4), ("ulysses", 6), ("hamilton", 4),
                                 ("allgather", 4), ("usp", 4)):
            with self.subTest(algorithm=algorithm):
                result = spattn(3, "run", "--algo", algorithm, "--transport", "oneccl", "--seq", "144", "--heads",
                                str(heads), "--kv-heads", "2", "--head-dim", "8", "--causal", "--backward", "--check")
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
                self.assertIn("(cpu) over oneccl", result.stdout)
                self.assertIn("check PASSED", result.stdout)

    def test_oneccl_runs_where_built_and_is_refused_clearly_where_not(self):
        result = spattn(2, "run", "--transport", "oneccl", "--seq", "96")
        if ONECCL_BUILT:
            self.assertEqual(result.returncode, 0, result.stderr)
        else:
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("transport oneccl: this build of spattn has no oneCCL", result.stderr)


SHARED_MEMORY = "/dev/shm"


def shared_memory_of_ranks():
    """libfabric's shared-memory regions in /dev/shm, named `PID:...` after the process that made
    them."""
    if not os.path.isdir(SHARED_MEMORY):
        return set()
    return {name for name in os.listdir(SHARED_MEMORY) if ":" in name and name.split(":")[0].isdigit()}


def remove_shared_memory_of_ended_ranks(before):
    """Removes the regions that appeared since `before` and whose process has ended. A rank that
    ends on a fault (killed, or giving up on a killed peer) never unmaps its region (64 MB), and a
    region left over makes a later process with the same PID fail to open oneCCL's shared-memory
    transport (fi_enable: Device or resource busy)."""
    for name in shared_memory_of_ranks() - before:
        try:
            os.kill(int(name.split(":")[0]), 0)
        except ProcessLookupError:
            try:
                os.remove(os.path.join(SHARED_MEMORY, name))
            except FileNotFoundError:
                pass
        except PermissionError:  # a process of another user, still running
            pass


class FaultyRank(unittest.TestCase):
    """SPATTN_FAULT kills or stalls rank 1 at its first transfer: every other rank prints that it
    timed out (SPATTN_TIMEOUT), waiting for whom, at which step, and the job ends, instead of
    hanging. Open MPI ends a job at once when a rank is killed, so the kill runs under
    --enable-recovery, which leaves the other ranks to find out for themselves."""

    TIMEOUT = 2

    def run_with_fault(self, fault, ranks, algorithm, launcher_options=(), transport="mpi", environment=None):
        regions_before = shared_memory_of_ranks()
        started = time.monotonic()
        try:
            result = spattn(ranks, "run", "--algo", algorithm, "--transport", transport, "--seq", "96", "--heads", "4",
                            "--head-dim", "8",
                            environment=dict(environment or {}, SPATTN_TIMEOUT=str(self.TIMEOUT),
                                             SPATTN_FAULT=fault + ":1:0"),
                            launcher_options=launcher_options)
        finally:
            remove_shared_memory_of_ended_ranks(regions_before)
        elapsed = time.monotonic() - started
        if not launcher_options:  # under --enable-recovery, mpirun's status is 0 whatever the ranks did
            self.assertNotEqual(result.returncode, 0)
        for rank in (0, 2, 3)[:ranks - 1]:
            self.assertRegex(result.stderr, r"rank %d of %d timed out after %d s waiting for .* \(at step \d+ of the "
                             r"forward's steps 0-\d+\)" % (rank, ranks, self.TIMEOUT))
        # The timeout, the launcher's start and end, and the ranks sharing 2 cores.
        self.assertLess(elapsed, self.TIMEOUT + 10, result.stderr)

    def test_a_killed_rank_is_reported_by_every_other_rank(self):
        for algorithm in ("zigzag", "ulysses"):
            with self.subTest(algorithm=algorithm):
                self.run_with_fault("kill", 4, algorithm, launcher_options=("--enable-recovery",))

    def test_a_rank_stalled_for_ever_is_reported_and_the_job_ends(self):
        for algorithm in ("ring", "allgather"):
            with self.subTest(algorithm=algorithm):
                self.run_with_fault("stall", 4, algorithm)

    def test_a_rank_stalled_for_ever_over_oneccl_is_reported_and_the_job_ends(self):
        if not ONECCL_BUILT:
            self.skipTest("this spattn has no oneccl transport")
        for algorithm in ("ring", "allgather", "ulysses"):
            with self.subTest(algorithm=algorithm):
                self.run_with_fault("stall", 4, algorithm, transport="oneccl")

    def test_a_killed_rank_over_oneccl_in_shared_memory_is_reported_by_every_other_rank(self):
        # Ranks of one host over oneCCL's shared-memory transport. Over its default TCP provider a
        # peer's death ends the neighbouring ranks from inside oneCCL's worker thread (an exception
        # there ends the process) before they can report it (README, "When a rank dies or stalls").
        if not ONECCL_BUILT:
            self.skipTest("this spattn has no oneccl transport")
        for algorithm in ("zigzag", "ulysses", "allgather"):
            with self.subTest(algorithm=algorithm):
                self.run_with_fault("kill", 4, algorithm, launcher_options=("--enable-recovery",), transport="oneccl",
                                    environment={"FI_PROVIDER": "shm", "CCL_ATL_SHM": "1"})

    def test_bad_timeout_and_fault_values_name_the_allowed_form(self):
        result = spattn(2, "run", environment={"SPATTN_TIMEOUT": "soon"})
        self.assertEqual(result.returncode, 1)
        self.assertIn("SPATTN_TIMEOUT='soon' is not a timeout; allowed: a positive number of seconds", result.stderr)
        result = spattn(2, "run", environment={"SPATTN_FAULT": "explode:1:0"})
        self.assertEqual(result.returncode, 1)
        self.assertIn("SPATTN_FAULT='explode:1:0' is not a fault to inject; allowed: '<kill|stall>:<rank>:<step>",
                      result.stderr)


class CostModelComparison(unittest.TestCase):
    """bench/compare_with_cost_model.py sets a measured time beside `spattn plan --compare`'s
    prediction at the kernel rate that one GPU measured on the shard."""

    def test_measured_time_sits_beside_the_models_at_the_shards_rate(self):
        header = ("implementation,algorithm,gpus,device,batch,heads,kv_heads,head_dim,tokens_per_gpu,causal,dtype,"
                  "pass,ms,tflops_per_gpu,ideal_tflops,percent_of_ideal,peak_memory_mib")
        shape = "1,32,8,128,8192,1,bf16,forward+backward"
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "bench.csv")
            with open(path, "w") as f:
                f.write(header + "\n")
                f.write("spattn_local_shard,local,1,GPU," + shape + ",4.0,400,,,100\n")
                f.write("spattn,zigzag,2,GPU x2," + shape + ",12.5,300,,75,100\n")
                f.write("spattn,ulysses,2,GPU x2," + shape + ",13.0,290,,72,100\n")
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                  "compare_with_cost_model.py")
            table = subprocess.run([sys.executable, script, path, "--spattn", SPATTN, "--preset", "nvswitch"],
                                   capture_output=True, text=True, env=ENV, check=True).stdout
        model = subprocess.run([SPATTN, "plan", "--compare", "--json", "--preset", "nvswitch", "--ranks", "2",
                                "--seq", "16384", "--heads", "32", "--kv-heads", "8", "--head-dim", "128",
                                "--causal", "--tflops", "400.000"], capture_output=True, text=True, env=ENV,
                               check=True).stdout
        predicted = {entry["algo"]: 1e3 * entry["forward_backward_s"] for entry in json.loads(model)["strategies"]
                     if entry["not_applicable"] is None}
        for algorithm, measured in (("zigzag", 12.5), ("ulysses", 13.0)):
            row = [line for line in table.splitlines() if "| %s |" % algorithm in line]
            self.assertEqual(len(row), 1, table)
            cells = [cell.strip() for cell in row[0].strip("|").split("|")]
            self.assertEqual(cells[:6], ["2", "8k", "causal", "forward+backward", "8", "400"], row)
            self.assertAlmostEqual(float(cells[8]), predicted[algorithm], places=2)
            self.assertAlmostEqual(float(cells[9]), measured / predicted[algorithm], places=2)


class PlanJson(unittest.TestCase):
    """`spattn plan --json` is valid JSON up to 1024 ranks: the Hamiltonian schedule (its cycles
    visit every rank once, its out mapping sends one slot to every other rank) and the model of
    every strategy under a sliding window."""

    def plan(self, *arguments):
        result = subprocess.run([SPATTN, "plan", *arguments, "--json"], capture_output=True, text=True, env=ENV,
                                timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def test_hamilton_at_1024_ranks(self):
        schedule = self.plan("--algo", "hamilton", "--ranks", "1024", "--seq", str(2 * 1024 * 1023))
        self.assertEqual(len(schedule["cycles"]), 1023)
        for cycle in schedule["cycles"]:
            self.assertEqual(sorted(cycle), list(range(1024)))
        for rank, row in enumerate(schedule["out_mapping"]):
            self.assertEqual(sorted(slot for slot in row if slot >= 0), list(range(1023)), rank)

    def test_every_strategy_modelled_at_1024_ranks_with_a_window(self):
        model = self.plan("--compare", "--ranks", "1024", "--causal", "--window", "65536,0", "--seq", str(2 * 1024 * 1023))
        strategies = {entry["algo"]: entry for entry in model["strategies"]}
        self.assertEqual(model["window"], [65536, 0])
        self.assertEqual(model["cluster"]["nodes"], 128)
        for name in ("ring", "zigzag", "hamilton", "allgather", "usp"):
            self.assertIsNone(strategies[name]["not_applicable"], name)
            self.assertGreater(strategies[name]["forward_backward_s"], 0, name)
            self.assertGreaterEqual(strategies[name]["forward_backward_exposed_transfer_s"], 0, name)
        self.assertIn("divisible by ranks (1024)", strategies["ulysses"]["not_applicable"])


class Timeline(unittest.TestCase):
    """`spattn run --timeline FILE`: every rank's compute and waiting per step, in one CSV from rank
    0, which bench/plot_timeline.py tabulates; a path that cannot be written ends every rank first."""

    def test_every_rank_and_step_of_both_passes_in_order(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "timeline.csv")
            result = spattn(3, "run", "--algo", "zigzag", "--causal", "--seq", "384", "--backward", "--iters", "2",
                            "--timeline", path)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            with open(path) as f:
                lines = f.read().splitlines()
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "plot_timeline.py")
            table = subprocess.run([sys.executable, script, path], capture_output=True, text=True, check=True).stdout
        self.assertEqual(lines[0], "rank,pass,step,kind,start_ms,end_ms,step_bytes_sent")
        rows = [line.split(",") for line in lines[1:]]
        self.assertEqual({(int(row[0]), row[1]) for row in rows},
                         {(rank, name) for rank in range(3) for name in ("forward", "backward")})
        for rank in range(3):
            for name in ("forward", "backward"):
                spans = [row for row in rows if int(row[0]) == rank and row[1] == name]
                self.assertEqual({int(row[2]) for row in spans}, {0, 1, 2})  # zigzag: one step per rank
                self.assertIn("comm_wait", {row[3] for row in spans})
                ends = 0.0
                for row in spans:
                    start, end = float(row[4]), float(row[5])
                    self.assertGreaterEqual(start, ends - 1e-3, row)
                    self.assertGreaterEqual(end, start, row)
                    ends = end
                # Rank's K and V go around: steps 0 and 1 send, the last step only receives.
                sent = {int(row[2]): int(row[6]) for row in spans}
                self.assertGreater(sent[0], 0)
        self.assertIn("| forward | 2 |", table)
        self.assertIn("| backward | 0 |", table)

    def test_a_path_that_cannot_be_written_ends_every_rank(self):
        result = spattn(2, "run", "--timeline", "/nonexistent-directory/timeline.csv")
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("--timeline /nonexistent-directory/timeline.csv: cannot open the file for writing", result.stderr)


class KernelBenchTable(unittest.TestCase):
    """bench/plot_kernel_results.py tabulates the kernel benchmark's CSV: one table per pass, one row
    per case, the kernels' rates and the own kernel's ratios to cuDNN and to PyTorch's flash backend."""

    @staticmethod
    def tables_of(rows):
        """The script's tables of a CSV holding `rows`."""
        return bench_script_output("plot_kernel_results.py", {"kernel-bench.csv": rows})

    def test_rates_and_ratios_per_pass_and_case(self):
        text = self.tables_of(["own,backward,0,8192,128,32,32,bf16,7.0,390",
                               "own,forward,0,8192,128,32,32,bf16,1.7,640",
                               "cudnn,forward,0,8192,128,32,32,bf16,1.8,620",
                               "sdpa_flash,forward,0,8192,128,32,32,bf16,3.1,350",
                               "own,forward,1,4096,64,32,32,bf16,0.8,360",
                               "cudnn,backward,0,8192,128,32,32,bf16,6.0,455"])
        sections = text.split("\n\n### ")
        self.assertEqual([section.splitlines()[0].lstrip("# ") for section in sections],
                         ["forward TFLOP/s", "backward TFLOP/s"], text)

        def header_and_rows(section):
            lines = section.splitlines()[2:]  # after the heading and the blank line
            return (lines[0].split("|")[1:-1],
                    [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]])

        header, rows = header_and_rows(sections[0])
        self.assertEqual(header, [" D ", " causal ", " S ", " own ", " cudnn ", " sdpa_flash ", " own/cudnn ",
                                  " own/sdpa_flash "], text)
        self.assertEqual(rows, [["64", "yes", "4k", "360", "-", "-", "-", "-"],
                                ["128", "no", "8k", "640", "620", "350", "1.03", "1.83"]], text)
        header, rows = header_and_rows(sections[1])
        self.assertEqual(header, [" D ", " causal ", " S ", " own ", " cudnn ", " own/cudnn ", " own/sdpa_flash "],
                         text)
        self.assertEqual(rows, [["128", "no", "8k", "390", "455", "0.86", "-"]], text)

    def test_merge_beside_the_plain_forward_with_its_cost(self):
        text = self.tables_of(["own_merge,forward,0,8192,128,32,8,bf16,2.0,600",
                               "own,forward,0,8192,128,32,8,bf16,1.7,640"])
        lines = text.splitlines()
        self.assertEqual(lines[2].split("|")[1:-1], [" D ", " causal ", " S ", " own ", " own_merge ", " own/cudnn ",
                                                     " own/sdpa_flash ", " own_merge/own "], text)
        self.assertEqual([cell.strip() for cell in lines[4].strip("|").split("|")],
                         ["128", "no", "8k", "640", "600", "-", "-", "0.94"], text)


def variants_table(script, variants, header=KERNEL_BENCH_HEADER):
    """bench/`script`'s table of one CSV per entry of `variants` (a build's name: its CSV's lines):
    its header cells, rows of cells, and the lines under the table."""
    lines = bench_script_output(script, {name + ".csv": rows for name, rows in variants.items()}, header).splitlines()
    end = lines.index("") if "" in lines else len(lines)
    return ([cell.strip() for cell in lines[0].strip("|").split("|")],
            [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:end]], lines[end + 1:])


class KernelVariantsTable(unittest.TestCase):
    """bench/compare_kernel_variants.py puts builds of the own kernel side by side (device-run.sh's
    kernel-ab): a row per pass, case and own kernel, each build's median rate over its rounds, its
    ratio to the first build's and, where cuDNN ran beside it, to cuDNN; then cuDNN's kernels, which
    no build changes, and under the table how far they moved between builds (the noise) and how
    many rounds each build had where they differ."""

    @staticmethod
    def table_of(variants):
        return variants_table("compare_kernel_variants.py", variants)

    def test_every_own_kernel_against_the_base_without_cudnn(self):
        header, rows, notes = self.table_of({
            "base": ["own,forward,1,8192,128,32,8,bf16,2.0,600", "own_merge,forward,1,8192,128,32,8,bf16,2.4,500",
                     "own,forward,1,8192,128,32,8,bf16,2.0,620", "own_merge,forward,1,8192,128,32,8,bf16,2.4,480"],
            "merge-first": ["own,forward,1,8192,128,32,8,bf16,2.1,570", "own_merge,forward,1,8192,128,32,8,bf16,2.2,550",
                            "own,forward,1,8192,128,32,8,bf16,2.1,570", "own_merge,forward,1,8192,128,32,8,bf16,2.2,540"]})
        self.assertEqual(header, ["pass", "D", "causal", "S", "kernel", "base", "merge-first"])
        self.assertEqual(rows, [["forward", "128", "yes", "8k", "own", "610", "570 (0.934 x base)"],
                                ["forward", "128", "yes", "8k", "own_merge", "490", "545 (1.112 x base)"]])
        self.assertEqual(notes, [])  # two rounds each

    def test_ratios_to_the_cudnn_timed_beside_each_round(self):
        _, rows, notes = self.table_of({
            "base": ["own,backward,0,4096,64,32,32,bf16,1.0,400", "cudnn,backward,0,4096,64,32,32,bf16,1.0,500",
                     "own,backward,0,4096,64,32,32,bf16,1.0,360", "cudnn,backward,0,4096,64,32,32,bf16,1.0,450"],
            "variant": ["own,backward,0,4096,64,32,32,bf16,1.0,440", "cudnn,backward,0,4096,64,32,32,bf16,1.0,500"]})
        self.assertEqual(rows, [["backward", "64", "no", "4k", "own", "380 (0.800 x cuDNN)",
                                 "440 (1.158 x base, 0.880 x cuDNN)"],
                                ["backward", "64", "no", "4k", "cudnn (unchanged)", "475", "500 (1.053 x base)"]])
        self.assertEqual(notes, ["Noise: the unchanged kernels' medians moved up to 5.3% from the base build's "
                                 "(median 5.3%).", "", "Rounds timed: base 2, variant 1."])

    def test_every_cudnn_kernel_is_unchanged_and_measures_the_noise(self):
        _, rows, notes = self.table_of({
            "base": ["own_deterministic,backward,1,8192,128,32,8,bf16,1.0,400",
                     "cudnn,backward,1,8192,128,32,8,bf16,1.0,500",
                     "cudnn_deterministic,backward,1,8192,128,32,8,bf16,1.0,420"],
            "turn-order": ["own_deterministic,backward,1,8192,128,32,8,bf16,1.0,480",
                           "cudnn,backward,1,8192,128,32,8,bf16,1.0,510",
                           "cudnn_deterministic,backward,1,8192,128,32,8,bf16,1.0,399"]})
        self.assertEqual([row[4] for row in rows],
                         ["own_deterministic", "cudnn (unchanged)", "cudnn_deterministic (unchanged)"])
        self.assertEqual(rows[2][5:], ["420 (0.840 x cuDNN)", "399 (0.950 x base, 0.782 x cuDNN)"])
        self.assertEqual(notes, ["Noise: the unchanged kernels' medians moved up to 5.0% from the base build's "
                                 "(median 3.5%)."])


class BenchVariantsTable(unittest.TestCase):
    """bench/compare_bench_variants.py puts builds measured by the distributed bench side by side
    (device-run.sh's bench-ab): a row per bench row, each build's median per-GPU rate over its
    rounds and its ratio to the first build's; under the table, the rounds where they differ."""

    @staticmethod
    def row(implementation, algorithm, tokens, bench_pass, tflops):
        return (f"{implementation},{algorithm},2,H200,1,32,8,128,{tokens},1,bf16,{bench_pass},1.0,{tflops},,,100")

    def test_medians_ratios_and_the_rounds_of_a_stage_ended_early(self):
        header, rows, notes = variants_table("compare_bench_variants.py", {
            "base": [self.row("spattn_own", "zigzag", 8192, "forward+backward", 500),
                     self.row("spattn_own", "zigzag", 8192, "forward+backward", 490),
                     self.row("spattn_own", "zigzag", 8192, "forward+backward", 480)],
            "dv-early": [self.row("spattn_own", "zigzag", 8192, "forward+backward", 515)]}, GPU_BENCH_HEADER)
        self.assertEqual(header[-2:], ["base", "dv-early (x base)"])
        self.assertEqual(rows, [["spattn_own", "zigzag", "8k", "8", "yes", "forward+backward", "490.0",
                                 "515.0 (1.051)"]])
        self.assertEqual(notes, ["Rounds timed: base 3, dv-early 1."])


# nvidia-smi's clock samples as scripts/device-run.sh takes them: timestamp, GPU, SM MHz, memory
# MHz, W, degrees C, reason bits (0x1 idle, 0x4 the power cap).
CLOCK_SAMPLES = """2026/11/29 00:41:54.551, 0, 345, 3201, 79.92, 39, 0x0000000000000001
2026/11/29 00:41:54.758, 0, 1980, 3201, 650.00, 50, 0x0000000000000000
2026/11/29 00:41:54.958, 0, 1800, 3201, 700.00, 55, 0x0000000000000004
2026/11/29 00:41:55.158, 1, 1200, 3201, 300.00, 45, 0x0000000000000004
2026/11/29 00:41:55.358, 0, 1700, 3201, [N/A], 56, 0x0000000000000004
2026/11/29 00:41:56.000, 0, 1980, 3201, 500.00, 50, 0x0000000000000000
2026/11/29 00:41:56.2
"""


class ClockSamples(unittest.TestCase):
    """bench/clock_samples.py sums up the clock samples of a stage in one line: only samples under
    load, the median and lowest SM clock, the highest power, the power cap's share and its clock."""

    def test_summary_of_the_samples_under_load(self):
        with tempfile.TemporaryDirectory() as directory:
            clocks = os.path.join(directory, "clocks.csv")
            with open(clocks, "w") as f:
                f.write(CLOCK_SAMPLES)
            self.assertEqual(run_bench_script("clock_samples.py", clocks).strip(),
                             "under load 5 of 6 samples: SM clock median 1800 MHz, lowest 1200; power highest 700 W; "
                             "held down by the power cap in 60% of them, median 1700 MHz there")


class PowerByWindow(unittest.TestCase):
    """bench/power_by_window.py sets each sustained kernel-bench run beside the samples of GPU 0
    under load inside its wall-clock window: mean power, median clock, the power cap's share and
    TFLOP/s per GHz; a window without samples gets dashes."""

    def test_each_window_with_its_samples(self):
        with tempfile.TemporaryDirectory() as directory:
            clocks, windows = os.path.join(directory, "clocks.csv"), os.path.join(directory, "windows.csv")
            with open(clocks, "w") as f:
                f.write(CLOCK_SAMPLES)
            with open(windows, "w") as f:
                f.write("kernel,pass,causal,seq,head_dim,start,end,ms,tflops\n"
                        "own,backward,1,16384,128,2026/11/29 00:41:54.500,2026/11/29 00:41:55.400,10.8,510\n"
                        "cudnn,backward,1,16384,128,2026/11/29 00:41:55.900,2026/11/29 00:41:56.100,10.6,520\n"
                        "cudnn,forward,1,16384,128,2026/11/29 00:41:57.000,2026/11/29 00:41:58.000,3.3,660\n")
            lines = run_bench_script("power_by_window.py", windows, clocks).splitlines()
        rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
        self.assertEqual(rows, [
            # GPU 0's loaded samples 54.758, 54.958, 55.358 (the idle one and GPU 1's left out)
            ["backward", "128", "yes", "16k", "own", "510.0", "3", "675", "1800", "67%", "283.3"],
            ["backward", "128", "yes", "16k", "cudnn", "520.0", "1", "500", "1980", "0%", "262.6"],
            ["forward", "128", "yes", "16k", "cudnn", "660.0", "0", "-", "-", "-", "-"]])


if __name__ == "__main__":
    SPATTN = sys.argv.pop(1)
    ONECCL_BUILT = "oneccl" in subprocess.run([SPATTN, "info"], capture_output=True, text=True).stdout
    unittest.main(verbosity=2)
