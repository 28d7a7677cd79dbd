"""Time the Python layer adds to one call: spattn.ring_flash_attn_func against the C++ plan's
forward called directly through spattn._core, at a shape small enough that the layer shows.
    mpiexec -n 1 python3 bench/python_call_overhead.py [--seq 64 --heads 2 --head-dim 16]
"""

import argparse
import time

import torch

import spattn


def microseconds_per_call(call, calls: int, warmup: int = 200) -> float:
    for _ in range(warmup):
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=64, help="tokens per rank")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2000)
    arguments = parser.parse_args()
    rank, world_size, _ = spattn.setup_distributed(device="cpu")
    shape = (1, arguments.seq, arguments.heads, arguments.head_dim)  # (B, S_local, H, D)
    q, k, v = (torch.randn(shape) for _ in range(3))
    plan = spattn.plans.get_plan(spattn.communicator.mpi_world(), "ring", batch=1, local_seq=arguments.seq,
                                 heads=arguments.heads, kv_heads=arguments.heads, head_dim=arguments.head_dim,
                                 dtype="fp32")
    out, lse = torch.empty_like(q), torch.empty(1, arguments.heads, arguments.seq)
    direct = microseconds_per_call(lambda: plan.forward(q, k, v, out, lse), arguments.calls)
    wrapper = microseconds_per_call(lambda: spattn.ring_flash_attn_func(q, k, v), arguments.calls)
    q_leaf = q.clone().requires_grad_()
    with_graph = microseconds_per_call(lambda: spattn.ring_flash_attn_func(q_leaf, k, v), arguments.calls)
    if rank == 0:
        print(f"ring, {world_size} rank(s), (B, S_local, H, D) = {shape} fp32, CPU: C++ plan.forward {direct:.1f} us, "
              f"ring_flash_attn_func {wrapper:.1f} us (Python layer +{wrapper - direct:.1f} us), "
              f"with an autograd graph {with_graph:.1f} us")


if __name__ == "__main__":
    main()
