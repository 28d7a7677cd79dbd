#!/usr/bin/env python3
"""PyTorch's SDPA forward and backward on one GPU, beside spattn's kernel benchmark.

A kernel's rate means something only beside its peers: this times torch's scaled_dot_product_attention
with the flash-attention backend (kernel ``sdpa_flash``) and the cuDNN backend (``sdpa_cudnn``) on
the cases and passes of bench/kernel_bench.cpp (same batch rule, FLOP convention and timing: the
median over repeats of back-to-back calls between CUDA events, two input sets alternating) and
appends rows to its CSV:

    python3 bench/kernel_sdpa.py --csv kernel-bench.csv [--passes forward,backward,forward+backward]

One timed call holds, per pass: forward, the attention of inputs that need no gradient (no
autograd graph, as an inference call); backward, torch.autograd.grad of a forward made before
timing (with q, k, v requiring gradients, under the same backend) from a fixed random gradient of
its output, the graph retained; forward+backward, that forward and its torch.autograd.grad. GQA
(--kv-heads below --heads) goes through SDPA's enable_gqa, backward too.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
from typing import Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CSV_HEADER = ("kernel", "pass", "causal", "seq", "head_dim", "heads", "kv_heads", "dtype", "ms", "tflops")
FORWARDS_IN = {"forward": 1.0, "backward": 2.5, "forward+backward": 3.5}  # a pass's FLOP in forwards
BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
# The kernels spattn_kernel_bench times (bench/kernel_bench.cpp).
SPATTN_KERNELS = ("own", "own_fp32_out", "own_merge", "cudnn", "own_deterministic", "cudnn_deterministic")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def positive_list(text: str) -> list[int]:
    values = [int(item) for item in text.split(",") if item]
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", default=",".join(FORWARDS_IN))
    parser.add_argument("--seqs", type=positive_list, default=[1024, 2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--head-dims", type=positive_list, default=[64, 128])
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--kernels", default="sdpa_flash,sdpa_cudnn")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=32)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--csv", required=True)
    args = parser.parse_args(argv)
    # One --kernels list serves both benchmarks (device-run.sh passes the same options to each):
    # spattn_kernel_bench's names are its own to time, this script times PyTorch's.
    names = [name for name in args.kernels.split(",") if name]
    unknown = [name for name in names if name not in BACKENDS and name not in SPATTN_KERNELS]
    if unknown:
        parser.error(f"--kernels: unknown {unknown}; allowed: {', '.join(BACKENDS)} "
                     f"(and spattn_kernel_bench's {', '.join(SPATTN_KERNELS)}, which it leaves to that program)")
    args.kernels = [name for name in names if name in BACKENDS]
    args.passes = [name for name in args.passes.split(",") if name]
    unknown = [name for name in args.passes if name not in FORWARDS_IN]
    if unknown or not args.passes:
        parser.error(f"--passes: unknown {unknown}; allowed: {', '.join(FORWARDS_IN)}")
    if args.heads % args.kv_heads:
        parser.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    return args


def flops(batch: int, heads: int, sequence: int, head_dim: int, causal: bool) -> float:
    """Forward FLOP by the flash-attention convention: 4 B H S^2 D, half of it causal."""
    return 4.0 * batch * heads * sequence * sequence * head_dim * (0.5 if causal else 1.0)


def pass_call(pass_name: str, sets: list[list[torch.Tensor]], gradients: list[torch.Tensor], causal: bool,
              gqa: bool):
    """The timed call of `pass_name` on input set 0 or 1 (see the module's comment). Call it inside the
    backend's sdpa_kernel context: a backward runs the backend of its forward."""
    def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(query, key, value, is_causal=causal, enable_gqa=gqa)

    if pass_name == "forward":
        without_grad = [[tensor.detach() for tensor in inputs] for inputs in sets]
        return lambda index: attention(*without_grad[index])
    if pass_name == "backward":
        outputs = [attention(*inputs) for inputs in sets]
        return lambda index: torch.autograd.grad(outputs[index], sets[index], gradients[index], retain_graph=True)
    return lambda index: torch.autograd.grad(attention(*sets[index]), sets[index], gradients[index])


def median_milliseconds(call, warmup: int, iterations: int, repeats: int) -> float:
    for index in range(warmup):
        call(index % 2)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        for index in range(iterations):
            call(index % 2)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / iterations)
    return statistics.median(times)


def run(args: argparse.Namespace) -> list[dict[str, object]]:
    device = torch.device("cuda", 0)
    dtype = DTYPES[args.dtype]
    causal_values = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    rows = []
    for head_dim in args.head_dims:
        for causal in causal_values:
            for sequence in args.seqs:
                batch = max(1, 16384 // sequence)
                generator = torch.Generator(device=device).manual_seed(sequence + head_dim)

                def normal(heads: int) -> torch.Tensor:
                    return torch.randn(batch, heads, sequence, head_dim, device=device, dtype=dtype,
                                       generator=generator)

                sets = [[normal(heads).requires_grad_() for heads in (args.heads, args.kv_heads, args.kv_heads)]
                        for _ in range(2)]
                gradients = [normal(args.heads) for _ in range(2)]  # of the output, one per input set
                for kernel in args.kernels:
                    for pass_name in args.passes:
                        case = f"{kernel} {pass_name}: D {head_dim} causal {int(causal)} S {sequence}"
                        try:
                            with sdpa_kernel(BACKENDS[kernel]):
                                call = pass_call(pass_name, sets, gradients, causal, args.kv_heads != args.heads)
                                milliseconds = median_milliseconds(call, args.warmup, args.iters, args.repeats)
                        except RuntimeError as error:  # a backend that refuses the case
                            print(f"{case}: not run: {error}".splitlines()[0])
                            continue
                        tflops = (FORWARDS_IN[pass_name] * flops(batch, args.heads, sequence, head_dim, causal)
                                  / (milliseconds * 1e-3) * 1e-12)
                        print(f"{kernel:<10} {pass_name:<16} D {head_dim:3} causal {int(causal)} S {sequence:6} "
                              f"B {batch:2}: {milliseconds:8.3f} ms {tflops:7.1f} TFLOP/s", flush=True)
                        rows.append({"kernel": kernel, "pass": pass_name, "causal": int(causal), "seq": sequence,
                                     "head_dim": head_dim, "heads": args.heads, "kv_heads": args.kv_heads,
                                     "dtype": args.dtype, "ms": milliseconds, "tflops": tflops})
    return rows


def append_csv(path: str, rows: list[dict[str, object]]) -> None:
    new_file = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=CSV_HEADER)
        if new_file:
            writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    append_csv(args.csv, run(args))


if __name__ == "__main__":
    main()
