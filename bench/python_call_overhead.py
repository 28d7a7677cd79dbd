"""Time the Python layer adds to one call: spattn.ring_flash_attn_func against the C++ plan's
forward called directly through spattn._core, at a shape small enough that the layer shows.
    CPU:  mpiexec -n 1 python3 bench/python_call_overhead.py [--seq 64 --heads 2 --head-dim 16]
    GPU:  torchrun --nproc-per-node 1 bench/python_call_overhead.py --device cuda
On a GPU a run of calls is launched back to back and the device is waited for once at the end.
Each figure is the median of several trials, the three calls taking turns.
"""

import argparse
import statistics
import time
from typing import Callable, Dict, List

import torch

import spattn


def microseconds_per_call(call, calls: int, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6


def median_microseconds(calls_by_name: Dict[str, Callable[[], object]], calls: int, trials: int,
                        device: torch.device) -> Dict[str, float]:
    """The median over `trials` of each call's time per call, the calls taking turns within a
    trial, so that a slow moment of the machine does not land on one of them only."""
    for call in calls_by_name.values():  # warm-up: plans, caches, allocator
        microseconds_per_call(call, max(calls // 10, 10), device)
    times: Dict[str, List[float]] = {name: [] for name in calls_by_name}
    for _ in range(trials):
        for name, call in calls_by_name.items():
            times[name].append(microseconds_per_call(call, calls, device))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seq", type=int, default=64, help="tokens per rank")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=None, help="default 16 on the CPU, 64 on a GPU")
    parser.add_argument("--calls", type=int, default=500, help="calls per trial")
    parser.add_argument("--trials", type=int, default=9)
    arguments = parser.parse_args()
    rank, world_size, device = spattn.setup_distributed(device=arguments.device)
    # The GPU kernels take fp16/bf16 and head dims the flash kernels support.
    head_dim = arguments.head_dim or (64 if device.type == "cuda" else 16)
    dtype, dtype_name = (torch.bfloat16, "bf16") if device.type == "cuda" else (torch.float32, "fp32")
    shape = (1, arguments.seq, arguments.heads, head_dim)  # (B, S_local, H, D)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    communicator = spattn.communicator.communicator_for(device, None)
    plan = spattn.plans.get_plan(communicator, "ring", batch=1, local_seq=arguments.seq, heads=arguments.heads,
                                 kv_heads=arguments.heads, head_dim=head_dim, dtype=dtype_name)
    if device.type == "cuda":
        plan.set_stream(torch.cuda.current_stream(device).cuda_stream)
    out = torch.empty_like(q)
    lse = torch.empty(1, arguments.heads, arguments.seq, device=device)  # (B, H, S_local) fp32
    q_leaf = q.clone().requires_grad_()
    median = median_microseconds({"direct": lambda: plan.forward(q, k, v, out, lse),
                                  "wrapper": lambda: spattn.ring_flash_attn_func(q, k, v),
                                  "with_graph": lambda: spattn.ring_flash_attn_func(q_leaf, k, v)},
                                 arguments.calls, arguments.trials, device)
    direct, wrapper, with_graph = median["direct"], median["wrapper"], median["with_graph"]
    if rank == 0:
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        print(f"ring, {world_size} rank(s), (B, S_local, H, D) = {shape} {dtype_name}, {where}: "
              f"C++ plan.forward {direct:.1f} us, ring_flash_attn_func {wrapper:.1f} us "
              f"(Python layer +{wrapper - direct:.1f} us), with an autograd graph {with_graph:.1f} us; "
              f"medians of {arguments.trials} trials of {arguments.calls} calls")


if __name__ == "__main__":
    main()
