"""What the accuracy tests share: inputs, the fp64 reference, the single-rank baseline, running a
wrapper on this rank's shard and gathering its results, the project's accuracy criterion, and the
errors a refusal on one rank raises on every rank."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import _core

# Relative to the largest reference magnitude: the floor under the 2x criterion (as in
# apps/runner/accuracy_report.cpp), so that two runs that both match to round-off are not told apart;
# for dq, dk and dv the largest of out, dq, dk and dv (a gradient's round-off is that of the terms
# it is a difference of).
RELATIVE_FLOOR = 1e-6
OUTPUTS = ("out", "lse", "dq", "dk", "dv")


@dataclass(frozen=True)
class Problem:
    batch: int
    seq: int  # global length
    heads: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    causal: bool = False
    window: Tuple[int, int] = (-1, -1)
    softmax_scale: Optional[float] = None

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)


def fresh_seed() -> int:
    """A new seed per test, drawn on rank 0 and shared (SPATTN_TEST_SEED repeats one)."""
    seed = [int(os.environ.get("SPATTN_TEST_SEED", 0)) or int.from_bytes(os.urandom(4), "little")]
    dist.broadcast_object_list(seed, src=0)
    return seed[0]


def full_inputs(problem: Problem, seed: int) -> Dict[str, torch.Tensor]:
    """q, dout (B, S, H, D) and k, v (B, S, HK, D) of the whole sequence in the problem's dtype,
    standard normal (never zeros), the same on every rank."""
    generator = torch.Generator().manual_seed(seed)
    query_shape = (problem.batch, problem.seq, problem.heads, problem.head_dim)
    key_shape = (problem.batch, problem.seq, problem.kv_heads, problem.head_dim)
    shapes = {"q": query_shape, "k": key_shape, "v": key_shape, "dout": query_shape}
    return {name: torch.randn(shape, generator=generator).to(problem.dtype) for name, shape in shapes.items()}


def reference(problem: Problem, inputs: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """out, lse, dq, dk, dv in fp64 from the inputs as stored."""
    q, k, v = (inputs[name].double().requires_grad_() for name in ("q", "k", "v"))
    group_size = problem.heads // problem.kv_heads
    keys = k.repeat_interleave(group_size, dim=2)  # (B, S, H, D): query head h reads kv head h // group_size
    values = v.repeat_interleave(group_size, dim=2)
    scores = torch.einsum("bshd,bthd->bhst", q, keys) * problem.scale  # (B, H, S, S)
    positions = torch.arange(problem.seq)
    offset = positions[None, :] - positions[:, None]  # key - query
    left, right = problem.window
    if problem.causal:
        right = 0
    visible = torch.ones(problem.seq, problem.seq, dtype=torch.bool)
    if left >= 0:
        visible &= offset >= -left
    if right >= 0:
        visible &= offset <= right
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, H, S)
    out = torch.einsum("bhst,bthd->bshd", torch.exp(scores - lse[..., None]), values)
    out.backward(inputs["dout"].double())
    return {"out": out.detach(), "lse": lse.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def single_rank(problem: Problem, inputs: Dict[str, torch.Tensor], device: str = "cpu") -> Dict[str, torch.Tensor]:
    """The same-dtype baseline: spattn's kernels on the whole sequence in this process, on
    `device`, into NaN-poisoned outputs; the results come back on the CPU."""
    q, k, v, dout = (inputs[name].to(device) for name in ("q", "k", "v", "dout"))
    options = dict(causal=problem.causal, window_left=problem.window[0], window_right=problem.window[1],
                   softmax_scale=problem.softmax_scale)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((problem.batch, problem.heads, problem.seq), float("nan"), device=device)
    dq, dk, dv = (torch.full_like(x, float("nan")) for x in (q, k, v))
    if q.is_cuda:
        torch.cuda.synchronize()  # the local functions run on a stream of their own
    _core.local_forward(q, k, v, out, lse, **options)
    _core.local_backward(q, k, v, out, lse, dout, dq, dk, dv, **options)
    return {name: tensor.cpu() for name, tensor in zip(OUTPUTS, (out, lse, dq, dk, dv))}


def gather(layout: spattn.SequenceLayout, local: torch.Tensor, dim: int, group=None) -> torch.Tensor:
    """The full tensor from every rank's shard of `group`, in fp64 (exact for every input dtype),
    on the CPU."""
    local = local.detach().double().cpu().contiguous()
    shards = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(shards, local, group=group)
    return layout.unshard(shards, dim=dim)


# How a wrapper takes its inputs: "separate" (q, k, v), "kv" (q, kv) or "qkv" (qkv).
Packing = str


def distributed(func: Callable, packing: Packing, layout: spattn.SequenceLayout, problem: Problem,
                inputs: Dict[str, torch.Tensor], device: str = "cpu", group=None) -> Dict[str, torch.Tensor]:
    """Runs `func` forward and backward on this rank's shard on `device`, over `group`, and
    gathers out, lse, dq, dk, dv."""
    rank = dist.get_rank(group)
    q, k, v, dout = (layout.shard(inputs[name], rank).to(device) for name in ("q", "k", "v", "dout"))
    options = dict(causal=problem.causal, window_size=problem.window, softmax_scale=problem.softmax_scale,
                   return_attn_probs=True)
    if group is not None:  # modules such as UlyssesAttention hold their group and take none per call
        options["group"] = group
    if packing == "separate":
        leaves = [x.requires_grad_() for x in (q, k, v)]
        out, lse, _ = func(*leaves, **options)
    elif packing == "kv":
        kv = torch.stack([k, v], dim=2).requires_grad_()
        leaves = [q.requires_grad_(), kv]
        out, lse, _ = func(q, kv, **options)
    else:
        qkv = torch.stack([q, k, v], dim=2).requires_grad_()
        leaves = [qkv]
        out, lse, _ = func(qkv, **options)
    out.backward(dout)
    grads = [leaf.grad for leaf in leaves]
    if packing == "kv":
        grads = [grads[0], *grads[1].unbind(2)]
    elif packing == "qkv":
        grads = list(grads[0].unbind(2))
    results = {"out": out, "lse": lse, "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    return {name: gather(layout, tensor, dim=2 if name == "lse" else 1, group=group)
            for name, tensor in results.items()}


def max_error(x: torch.Tensor, expected: torch.Tensor) -> float:
    """max |x - expected|; inf where x is non-finite and expected is finite. Both -inf agree."""
    x = x.double()
    both_infinite = torch.isinf(expected) & (x == expected)
    if (~torch.isfinite(x) & ~both_infinite).any():
        return math.inf
    return (x - expected).abs().masked_fill(both_infinite, 0).max().item()


def accuracy_failures(distributed_results, single_rank_results, reference_results) -> Dict[str, str]:
    """The outputs whose distributed error exceeds 2 x the single-rank error + the floor."""
    def magnitude(name: str) -> float:
        finite = reference_results[name][torch.isfinite(reference_results[name])]
        return finite.abs().max().item() if finite.numel() else 0.0

    gradient_magnitude = max(magnitude(name) for name in OUTPUTS if name != "lse")
    failures = {}
    for name in OUTPUTS:
        expected = reference_results[name]
        floor = RELATIVE_FLOOR * (magnitude(name) if name in ("out", "lse") else gradient_magnitude)
        error = max_error(distributed_results[name], expected)
        baseline = max_error(single_rank_results[name], expected)
        bound = 2 * baseline + floor
        if not (math.isfinite(error) and math.isfinite(bound) and error <= bound):
            failures[name] = f"distributed error {error:.3g} > bound {bound:.3g} (single rank {baseline:.3g})"
    return failures


def raises_on_every_rank(bad_rank: int, message: str):
    """pytest.raises for a call that `bad_rank` alone refuses with ValueError(message): that rank
    raises it, and the others, which must not be left waiting, raise spattn.SpattnError naming it."""
    if dist.get_rank() == bad_rank:
        return pytest.raises(ValueError, match=message)
    return pytest.raises(spattn.SpattnError, match=f"rank {bad_rank} rejected the call: ValueError: {message}")
