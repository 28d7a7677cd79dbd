#!/usr/bin/env python3
"""PyTorch's own context parallelism, timed the way spattn times itself.

A number for spattn means little without the peer people would otherwise use: PyTorch's
``context_parallel`` (ring attention over DTensor), here on the cuDNN SDPA backend. This script
times it and its ideal (the same SDPA on one GPU over the whole sequence) and writes rows with
the same CSV header, FLOP convention and slowest-rank rule as spattn's benchmark, so that
bench/plot_results.py puts both on one chart.

Launch, on a machine with N GPUs:
    torchrun --standalone --nproc-per-node N bench/torch_context_parallel.py --csv results.csv
"""

from __future__ import annotations

import argparse
import csv
import enum
import importlib
import os
import sys
import warnings
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.nn.attention import SDPBackend, sdpa_kernel

CSV_HEADER = (
    "implementation", "algorithm", "gpus", "device", "batch", "heads", "kv_heads", "head_dim",
    "tokens_per_gpu", "causal", "dtype", "pass", "ms", "tflops_per_gpu", "ideal_tflops",
    "percent_of_ideal", "peak_memory_mib",
)
PASSES = ("forward", "forward+backward")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# The private module that holds context_parallel moved between releases: 2.9 and later keep it in
# _context_parallel/_attention.py (2.11 too, with _attention.py left as a re-exporting stub);
# 2.5 to 2.8 had it in _attention.py. The newest place comes first.
CONTEXT_PARALLEL_MODULES = (
    "torch.distributed.tensor.experimental._context_parallel._attention",
    "torch.distributed.tensor.experimental._attention",
)
CONTEXT_PARALLEL_NAMES = ("context_parallel", "context_parallel_unshard", "set_rotate_method",
                          "_cp_options")

# Rank 0 alone runs the one-GPU ideal while the others wait in a barrier; over a long global
# sequence that takes minutes, longer than NCCL's default 10-minute watchdog.
PROCESS_GROUP_TIMEOUT = timedelta(hours=2)

# The correctness check runs at this size: large enough for every rank to hold both halves of
# its load-balanced shard, small enough to cost milliseconds.
CHECK_TOKENS_PER_GPU = 1024
# A wrong ring (misplaced shard, bad merge) is off by O(1) of the largest value; rounding to
# bf16 or fp16 stays within a few units in the last place, far below this.
CHECK_RELATIVE_TOLERANCE = 0.05


@dataclass(frozen=True)
class ContextParallelApi:
    """The parts of PyTorch's private context-parallel module this benchmark needs."""

    module_name: str
    context_parallel: Callable
    context_parallel_unshard: Callable
    set_rotate_method: Callable[[str], None]
    options: object  # _cp_options: module-level settings the ring reads at every call


def import_context_parallel_api() -> ContextParallelApi:
    """Finds context_parallel where this PyTorch keeps it, or says every place it looked."""
    tried = []
    for module_name in CONTEXT_PARALLEL_MODULES:
        try:
            module: ModuleType = importlib.import_module(module_name)
        except ImportError as error:
            tried.append(f"{module_name}: {error}")
            continue
        missing = [name for name in CONTEXT_PARALLEL_NAMES if not hasattr(module, name)]
        if missing:
            tried.append(f"{module_name}: has no {', '.join(missing)}")
            continue
        return ContextParallelApi(module_name, module.context_parallel,
                                  module.context_parallel_unshard, module.set_rotate_method,
                                  module._cp_options)
    raise SystemExit(f"torch {torch.__version__} has no usable context_parallel; tried:\n  "
                     + "\n  ".join(tried))


class GqaMode(enum.Enum):
    """How keys and values with fewer heads than the queries reach cuDNN's SDPA."""

    EQUAL_HEADS = "equal heads"
    NATIVE = "native (enable_gqa=True)"
    EXPAND = "expanded (repeat_interleave)"


@dataclass(frozen=True)
class AttentionShape:
    """Everything about one attention problem except its sequence length and mask."""

    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_name: str

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtype_name]

    def flops(self, sequence: int, causal: bool, pass_name: str) -> float:
        """flash-attention's convention, so that every implementation is credited alike."""
        forward = 4.0 * self.batch * self.heads * sequence * sequence * self.head_dim
        if causal:
            forward /= 2
        return forward if pass_name == "forward" else 3.5 * forward


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job."""

    rank: int
    world: int
    device: torch.device
    mesh: DeviceMesh


def positive_even_list(text: str) -> list[int]:
    """Tokens per GPU must be even: load balancing cuts each shard into two halves."""
    values = [int(item) for item in text.split(",") if item.strip()]
    if not values or any(value <= 0 or value % 2 for value in values):
        raise argparse.ArgumentTypeError(f"need positive even integers, got {text!r}")
    return values


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time PyTorch's context_parallel (ring attention, cuDNN SDPA) and its "
                    "one-GPU ideal; write rows comparable with spattn's benchmark.",
        epilog="Launch: torchrun --standalone --nproc-per-node N "
               "bench/torch_context_parallel.py [options]")
    parser.add_argument("--tokens-per-gpu", type=positive_even_list,
                        default=positive_even_list("8192,32768,65536"),
                        help="comma list; the global sequence is this times the GPU count "
                             "(default 8192,32768,65536)")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=32,
                        help="fewer than --heads is grouped-query attention")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--rotate", choices=("allgather", "alltoall"), default="allgather",
                        help="how the ring moves K,V shards (set_rotate_method)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--csv", metavar="PATH", help="append rows here (header if new)")
    parser.add_argument("--device-name", help="written to the CSV "
                        "(default: torch.cuda.get_device_name())")
    parser.add_argument("--skip-ideal", action="store_true",
                        help="leave out the one-GPU ideal, which dominates the run time at long "
                             "sequences and does not depend on --rotate")
    args = parser.parse_args(argv)
    for name in ("heads", "kv_heads", "head_dim", "batch", "iters"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    if args.heads % args.kv_heads:
        parser.error(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    return args


def start_distributed() -> Ranks:
    """Joins the torchrun job with one GPU per rank and a 1-D mesh over all ranks."""
    if "RANK" not in os.environ:
        raise SystemExit("launch with torchrun: torchrun --standalone --nproc-per-node N "
                         f"{sys.argv[0]} (N = 1 runs context parallelism over one GPU)")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark times cuDNN attention on NVIDIA GPUs")
    local_rank = int(os.environ["LOCAL_RANK"])
    if local_rank >= torch.cuda.device_count():
        raise SystemExit(f"local rank {local_rank} has no GPU: this node has "
                         f"{torch.cuda.device_count()}; use --nproc-per-node <= that")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device, timeout=PROCESS_GROUP_TIMEOUT)
    world = dist.get_world_size()
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("context_parallel",))
    return Ranks(dist.get_rank(), world, device, mesh)


def choose_gqa_mode(shape: AttentionShape, device: torch.device) -> GqaMode:
    """Native GQA when cuDNN SDPA accepts it, else expanded keys and values.

    Native is preferred: expanding copies K and V up to the query head count, makes the ring
    carry heads / kv_heads times more bytes, and adds a reduction of dK and dV in backward, none
    of which an efficient peer pays. PyTorch's sdp_utils admits GQA for cuDNN in recent sources,
    while its documentation still names only flash and math; a release without it rejects
    enable_gqa under the cuDNN backend with "No available kernel". So one small forward and
    backward decides, and every rank takes the most cautious answer so that all run the same
    code path.
    """
    if shape.kv_heads == shape.heads:
        return GqaMode.EQUAL_HEADS
    probe_tokens = 256
    query, key, value = (
        torch.randn(shape.batch, heads, probe_tokens, shape.head_dim, device=device,
                    dtype=shape.dtype, requires_grad=True)
        for heads in (shape.heads, shape.kv_heads, shape.kv_heads))
    try:
        # A refusal first warns why each backend declined; the answer alone matters here.
        with warnings.catch_warnings(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            warnings.simplefilter("ignore")
            out = F.scaled_dot_product_attention(query, key, value, is_causal=True,
                                                 enable_gqa=True)
            out.sum().backward()
        native = 1
    except RuntimeError:
        native = 0
    agreed = torch.tensor([native], device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return GqaMode.NATIVE if agreed.item() else GqaMode.EXPAND


def attention(query: torch.Tensor,  # (B, H, S, D)
              key: torch.Tensor,  # (B, HK, S, D)
              value: torch.Tensor,  # (B, HK, S, D)
              causal: bool, gqa_mode: GqaMode) -> torch.Tensor:  # (B, H, S, D)
    """cuDNN SDPA; inside a context_parallel context the same call runs the ring."""
    if gqa_mode is GqaMode.EXPAND:
        group_size = query.size(1) // key.size(1)
        key = key.repeat_interleave(group_size, dim=1)
        value = value.repeat_interleave(group_size, dim=1)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        # Looked up through the module at every call: context_parallel replaces
        # F.scaled_dot_product_attention while its context is open.
        return F.scaled_dot_product_attention(query, key, value, is_causal=causal,
                                              enable_gqa=gqa_mode is GqaMode.NATIVE)


def random_global_tensors(shape: AttentionShape, sequence: int, seed: int,
                          device: torch.device) -> list[torch.Tensor]:
    """q, k, v and dout over the whole sequence; one seed on every rank makes them agree."""
    generator = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(shape.batch, heads, sequence, shape.head_dim, generator=generator,
                        device=device, dtype=shape.dtype)
            for heads in (shape.heads, shape.kv_heads, shape.kv_heads, shape.heads)]


def pass_runners(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 dout: torch.Tensor, causal: bool,
                 gqa_mode: GqaMode) -> dict[str, Callable[[], None]]:
    """One callable per timed pass, over leaves that require grad.

    The forward runs with grad enabled, as in training: the ring and the one-GPU kernel then
    both compute and keep the log-sum-exp, which spattn's forward also produces.
    """
    inputs = (query, key, value)

    def forward() -> None:
        attention(*inputs, causal, gqa_mode)

    def forward_backward() -> None:
        out = attention(*inputs, causal, gqa_mode)
        # autograd.grad rather than backward(): no .grad accumulates across iterations.
        torch.autograd.grad(out, inputs, grad_outputs=dout)

    return {"forward": forward, "forward+backward": forward_backward}


def mean_pass_milliseconds(run_pass: Callable[[], None], warmup: int, iterations: int,
                           across_ranks: bool) -> float:
    """Mean time of one pass by CUDA events, after warmup (which also builds cuDNN graphs)."""
    for _ in range(warmup):
        run_pass()
    torch.cuda.synchronize()
    if across_ranks:
        dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        run_pass()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iterations


def time_context_parallel(api: ContextParallelApi, ranks: Ranks, shape: AttentionShape,
                          tokens_per_gpu: int, causal: bool, gqa_mode: GqaMode, seed: int,
                          args: argparse.Namespace) -> dict[str, float]:
    """The slowest rank's mean milliseconds of each pass of the ring, and "peak_memory_mib": the
    most that any rank's PyTorch allocator held at once (tensors included)."""
    torch.cuda.reset_peak_memory_stats(ranks.device)
    # Load balancing (the head-tail, i.e. zigzag, order) is what makes the causal ring fair;
    # the ring refuses it without a causal mask.
    api.options.enable_load_balance = causal
    buffers = random_global_tensors(shape, tokens_per_gpu * ranks.world, seed, ranks.device)
    milliseconds = []
    # context_parallel shards the buffers in place along the sequence (dim 2); nothing reads
    # the global tensors afterwards, so restoring them would only cost a copy.
    with api.context_parallel(ranks.mesh, buffers=buffers, buffer_seq_dims=[2] * len(buffers),
                              no_restore_buffers=set(buffers)):
        query, key, value, dout = buffers
        for leaf in (query, key, value):
            leaf.requires_grad_()
        runners = pass_runners(query, key, value, dout, causal, gqa_mode)
        for pass_name in PASSES:
            milliseconds.append(mean_pass_milliseconds(runners[pass_name], args.warmup,
                                                       args.iters, across_ranks=True))
    peak_mib = torch.cuda.max_memory_allocated(ranks.device) / 2**20
    slowest = torch.tensor([*milliseconds, peak_mib], device=ranks.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return dict(zip((*PASSES, "peak_memory_mib"), slowest.tolist()))


def time_one_gpu(shape: AttentionShape, sequence: int, causal: bool, gqa_mode: GqaMode,
                 seed: int, device: torch.device,
                 args: argparse.Namespace) -> dict[str, float] | None:
    """The ideal: SDPA over the whole sequence on this GPU, or None where it does not fit; with
    "peak_memory_mib" as time_context_parallel has it."""

    def measure() -> dict[str, float]:
        query, key, value, dout = random_global_tensors(shape, sequence, seed, device)
        for leaf in (query, key, value):
            leaf.requires_grad_()
        runners = pass_runners(query, key, value, dout, causal, gqa_mode)
        result = {pass_name: mean_pass_milliseconds(runners[pass_name], args.warmup, args.iters,
                                                    across_ranks=False)
                  for pass_name in PASSES}
        result["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        return result

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    milliseconds = None
    try:
        milliseconds = measure()
    except torch.cuda.OutOfMemoryError:
        print(f"ideal: {sequence} tokens do not fit on one GPU; its columns stay empty",
              flush=True)
    # Outside the handler, whose traceback kept measure()'s tensors alive: hand the memory back
    # so that the next configuration starts from a clean pool.
    torch.cuda.empty_cache()
    return milliseconds


def check_against_one_gpu(api: ContextParallelApi, ranks: Ranks, shape: AttentionShape,
                          causal: bool, gqa_mode: GqaMode) -> str:
    """Max error of the ring's output and gradients against SDPA on one GPU, at a small size.

    Guards against a silently wrong peer: a fast ring that computes the wrong attention would
    otherwise look like a strong competitor.
    """
    api.options.enable_load_balance = causal
    sequence = CHECK_TOKENS_PER_GPU * ranks.world
    buffers = random_global_tensors(shape, sequence, seed=0, device=ranks.device)
    reference_inputs = [tensor.clone().requires_grad_() for tensor in buffers[:3]]
    reference_out = attention(*reference_inputs, causal, gqa_mode)
    references = [reference_out.detach(),
                  *torch.autograd.grad(reference_out, reference_inputs, buffers[3])]

    with api.context_parallel(ranks.mesh, buffers=buffers, buffer_seq_dims=[2] * len(buffers),
                              no_restore_buffers=set(buffers)):
        query, key, value, dout = buffers
        inputs = [leaf.requires_grad_() for leaf in (query, key, value)]
        out = attention(*inputs, causal, gqa_mode)
        local_results = [out.detach(), *torch.autograd.grad(out, inputs, dout)]
    # Unsharding undoes the load-balancing order, so it must see the same option as sharding.
    results = api.context_parallel_unshard(ranks.mesh, local_results, [2] * len(local_results))

    errors = torch.stack([(result.float() - reference.float()).abs().max()
                          for result, reference in zip(results, references)])
    magnitudes = torch.stack([reference.float().abs().max() for reference in references])
    dist.all_reduce(errors, op=dist.ReduceOp.MAX)
    parts = []
    suspect = False
    for name, error, magnitude in zip(("out", "dq", "dk", "dv"), errors.tolist(),
                                      magnitudes.tolist()):
        parts.append(f"{name} {error:.2e} (max |ref| {magnitude:.2e})")
        suspect |= error > CHECK_RELATIVE_TOLERANCE * magnitude
    verdict = "WARNING: the ring disagrees with one GPU" if suspect else "agrees"
    return (f"check {'causal' if causal else 'non-causal'}, {sequence} tokens, ring over "
            f"{ranks.world} rank(s) vs one GPU, max abs error: {', '.join(parts)}: {verdict}")


def tflops_per_gpu(shape: AttentionShape, tokens_per_gpu: int, gpus: int, causal: bool,
                   pass_name: str, milliseconds: float) -> float:
    """Credits every GPU with an equal share of the FLOPs of the whole sequence."""
    flops = shape.flops(tokens_per_gpu * gpus, causal, pass_name)
    return flops / (milliseconds * 1e-3) / gpus / 1e12


def result_row(implementation: str, algorithm: str, gpus: int, tokens_per_gpu: int,
               causal: bool, pass_name: str, milliseconds: float, shape: AttentionShape,
               device_name: str, ideal_tflops: float | None, peak_mib: float) -> dict[str, str]:
    """One CSV row; the ideal's own rows leave ideal_tflops and percent_of_ideal empty."""
    tflops = tflops_per_gpu(shape, tokens_per_gpu, gpus, causal, pass_name, milliseconds)
    return {
        "implementation": implementation, "algorithm": algorithm, "gpus": str(gpus),
        "device": device_name, "batch": str(shape.batch), "heads": str(shape.heads),
        "kv_heads": str(shape.kv_heads), "head_dim": str(shape.head_dim),
        "tokens_per_gpu": str(tokens_per_gpu), "causal": str(int(causal)),
        "dtype": shape.dtype_name, "pass": pass_name, "ms": f"{milliseconds:.4f}",
        "tflops_per_gpu": f"{tflops:.2f}",
        "ideal_tflops": "" if ideal_tflops is None else f"{ideal_tflops:.2f}",
        "percent_of_ideal": "" if ideal_tflops is None else f"{100 * tflops / ideal_tflops:.1f}",
        "peak_memory_mib": f"{peak_mib:.0f}",
    }


TABLE_COLUMNS = (("implementation", 22), ("algorithm", 15), ("gpus", 4), ("tokens_per_gpu", 14),
                 ("causal", 6), ("pass", 16), ("ms", 12), ("tflops_per_gpu", 14),
                 ("ideal_tflops", 12), ("percent_of_ideal", 16), ("peak_memory_mib", 15))


def print_table_rows(rows: list[dict[str, str]], with_header: bool) -> None:
    if with_header:
        print("  ".join(name.rjust(width) for name, width in TABLE_COLUMNS))
    for row in rows:
        print("  ".join(row[name].rjust(width) for name, width in TABLE_COLUMNS))
    sys.stdout.flush()


def check_csv_header(path: str) -> None:
    """Refuses, before any GPU time is spent, a CSV that already has another header."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    with open(path, newline="") as existing:
        found = next(csv.reader(existing), [])
    if tuple(found) != CSV_HEADER:
        raise SystemExit(f"{path} has another header: {','.join(found)}")


def append_csv(path: str, rows: list[dict[str, str]]) -> None:
    """Appends rows, with the header first when the file is new."""
    is_new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as output:
        writer = csv.DictWriter(output, fieldnames=CSV_HEADER)
        if is_new:
            writer.writeheader()
        writer.writerows(rows)


def run_benchmark(args: argparse.Namespace, api: ContextParallelApi, ranks: Ranks) -> None:
    shape = AttentionShape(args.batch, args.heads, args.kv_heads, args.head_dim, args.dtype)
    causal_modes = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    device_name = args.device_name or torch.cuda.get_device_name(ranks.device)
    algorithm = f"ring-{args.rotate}"
    api.set_rotate_method(args.rotate)
    gqa_mode = choose_gqa_mode(shape, ranks.device)
    is_reporter = ranks.rank == 0
    if is_reporter:
        print(f"torch {torch.__version__} ({api.module_name}), cuDNN "
              f"{torch.backends.cudnn.version()}, {ranks.world} x {device_name}, {algorithm}, "
              f"heads {shape.heads}/{shape.kv_heads} ({gqa_mode.value}), head dim "
              f"{shape.head_dim}, batch {shape.batch}, {shape.dtype_name}", flush=True)

    for causal in causal_modes:
        report = check_against_one_gpu(api, ranks, shape, causal, gqa_mode)
        if is_reporter:
            print(report, flush=True)

    # Each configuration is printed and appended as soon as it is measured, so that a run cut
    # off by a time limit keeps what it measured.
    configurations = [(tokens, causal) for tokens in args.tokens_per_gpu for causal in causal_modes]
    for index, (tokens_per_gpu, causal) in enumerate(configurations):
        seed = index + 1  # fresh values for every configuration; the check used seed 0
        ring_ms = time_context_parallel(api, ranks, shape, tokens_per_gpu, causal, gqa_mode,
                                        seed, args)
        sequence = tokens_per_gpu * ranks.world
        ideal_ms = None
        if is_reporter and not args.skip_ideal:
            ideal_ms = time_one_gpu(shape, sequence, causal, gqa_mode, seed, ranks.device, args)
        dist.barrier()
        if not is_reporter:
            continue
        rows = []
        for pass_name in PASSES:
            ideal_tflops = None
            if ideal_ms is not None:
                ideal_tflops = tflops_per_gpu(shape, sequence, 1, causal, pass_name,
                                              ideal_ms[pass_name])
            rows.append(result_row("torch_context_parallel", algorithm, ranks.world,
                                   tokens_per_gpu, causal, pass_name, ring_ms[pass_name], shape,
                                   device_name, ideal_tflops, ring_ms["peak_memory_mib"]))
            if ideal_ms is not None:
                rows.append(result_row("torch_sdpa_one_gpu", "local", 1, sequence, causal,
                                       pass_name, ideal_ms[pass_name], shape, device_name, None,
                                       ideal_ms["peak_memory_mib"]))
        print_table_rows(rows, with_header=index == 0)
        if args.csv:
            append_csv(args.csv, rows)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    if args.csv:
        check_csv_header(args.csv)
    api = import_context_parallel_api()
    ranks = start_distributed()
    try:
        run_benchmark(args, api, ranks)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
