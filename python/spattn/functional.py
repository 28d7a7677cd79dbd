"""Distributed attention as torch.autograd functions with ring-flash-attn's signatures.

Every function takes this rank's shard in flash-attn's layout, q: (B, S_local, H, D) and k, v:
(B, S_local, HK, D) with H % HK == 0, in the token layout of its strategy (spattn.sequence_layout
says which tokens each rank holds), and returns out: (B, S_local, H, D), or (out, lse, None) with
lse: (B, H, S_local) fp32 when return_attn_probs is set. Gradients flow to q, k and v.

CPU tensors run over spattn's MPI communicator of all ranks (launch with mpiexec); CUDA tensors run
over an NCCL communicator of `group` (any torch.distributed group; launch with torchrun or
mpiexec), their compute on torch's current stream.

Beyond ring-flash-attn's arguments, every function takes the keyword `kernel`, the block kernels
on CUDA: "auto" (spattn's own Hopper kernels where they support the call, cuDNN elsewhere), "own"
(an error where they do not) or "cudnn". The CPU has one set of kernels and takes only "auto".
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch

from . import _core, profiling
from .communicator import communicator_for, raise_on_every_rank
from .plans import dtype_name, get_plan

AttentionResult = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor, None]]


def _follow_current_stream(plan, device: torch.device) -> None:
    # CUDA: the plan's compute goes on torch's current stream, so it is ordered after the work
    # that made its inputs and before the work that reads its outputs, with no synchronization.
    if device.type == "cuda":
        plan.set_stream(torch.cuda.current_stream(device).cuda_stream)


class DistributedAttentionFunction(torch.autograd.Function):
    """out, lse = attention(q, k, v) through a spattn plan; backward gives dq, dk, dv."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan) -> Tuple[torch.Tensor, torch.Tensor]:
        # DLPack exports no tensor that requires grad; detach() shares the memory.
        q, k, v = (x.detach().contiguous() for x in (q, k, v))
        batch, local_seq, heads, _ = q.shape
        out = torch.empty_like(q, memory_format=torch.contiguous_format)  # (B, S_local, H, D)
        lse = torch.empty((batch, heads, local_seq), dtype=torch.float32, device=q.device)  # (B, H, S_local)
        _follow_current_stream(plan, q.device)
        profiling.record(plan.algorithm, "forward", plan.forward(q, k, v, out, lse, profile=profiling.recording()))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan = plan
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout: torch.Tensor, _dlse: Optional[torch.Tensor]):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = (torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v))
        _follow_current_stream(ctx.plan, q.device)
        timing = ctx.plan.backward(q, k, v, out, lse, dout.detach().to(q.dtype).contiguous(), dq, dk, dv,
                                   profile=profiling.recording())
        profiling.record(ctx.plan.algorithm, "backward", timing)
        return dq, dk, dv, None


def _argument_error(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
                    window_size: Tuple[int, int], alibi_slopes: Optional[torch.Tensor],
                    kernel: str) -> Optional[Exception]:
    """What is wrong with this rank's arguments, or None."""
    try:
        # The C++ core's names, and its message naming the allowed ones.
        _core.parse_kernel_choice(kernel if isinstance(kernel, str) else repr(kernel))
    except _core.SpattnError as error:
        return ValueError(_core.without_error_prefix(str(error)))
    if dropout_p != 0.0:
        return ValueError(f"dropout_p={dropout_p} is not supported: spattn computes exact attention without "
                          "dropout; allowed: 0.0")
    if alibi_slopes is not None:
        return ValueError("alibi_slopes is not supported: spattn has no ALiBi bias; allowed: None")
    if len(window_size) != 2:
        return ValueError(f"window_size={window_size!r}; expected (left, right), -1 meaning unbounded")
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, torch.Tensor):
            return TypeError(f"{name} is a {type(tensor).__name__}; expected a torch.Tensor")
        if tensor.device != q.device:
            return ValueError(f"{name} is on {tensor.device} but q is on {q.device}; q, k and v must share a device")
        if tensor.dim() != 4:
            return ValueError(f"{name} has shape {tuple(tensor.shape)}; expected 4 dimensions "
                              f"({'B, S_local, H, D' if name == 'q' else 'B, S_local, HK, D'})")
    return None


# torch.compile runs the call eagerly (a graph break): dynamo cannot trace the C++ plan, and
# inside a traced autograd.Function the current stream has no CUDA handle.
@torch.compiler.disable
def _attention(algorithm: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
               softmax_scale: Optional[float], causal: bool, window_size: Tuple[int, int],
               alibi_slopes: Optional[torch.Tensor], return_attn_probs: bool, group: Any,
               kernel: str, document_lengths: Tuple[int, ...] = (), document_split: str = "per_document",
               deterministic: bool = False, **degrees: Any) -> AttentionResult:
    device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    # A group or device that cannot work fails alike on every rank, before any exchange.
    communicator = communicator_for(device, group)
    # A bad argument may be on one rank only: that rank refuses in the agreement that starts the
    # other ranks' call, so they raise too instead of waiting for it.
    raise_on_every_rank(_argument_error(q, k, v, dropout_p, window_size, alibi_slopes, kernel), communicator)
    batch, local_seq, heads, head_dim = q.shape
    plan = get_plan(communicator, algorithm, batch=batch, local_seq=local_seq, heads=heads, kv_heads=k.shape[2],
                    head_dim=head_dim, dtype=dtype_name("q", q.dtype), causal=causal,
                    window_size=(int(window_size[0]), int(window_size[1])), softmax_scale=softmax_scale,
                    kernel=kernel, document_lengths=document_lengths, document_split=document_split,
                    deterministic=deterministic, **degrees)
    out, lse = DistributedAttentionFunction.apply(q, k, v, plan)
    return (out, lse, None) if return_attn_probs else out


def _split_packed(name: str, packed: torch.Tensor, parts: int) -> Tuple[torch.Tensor, ...]:
    # (B, S_local, parts, heads, D) -> parts tensors of (B, S_local, heads, D)
    if packed.dim() != 5 or packed.shape[2] != parts:
        raise ValueError(f"{name} has shape {tuple(packed.shape)}; expected (B, S_local, {parts}, heads, D)")
    return packed.unbind(dim=2)


# deterministic=True (flash-attn's): the same bits every run (AttentionOptions::deterministic); on
# CUDA the backward then adds dq in one order, at some cost in speed. The CPU always does.


def ring_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                         alibi_slopes=None, deterministic=False, return_attn_probs=False,
                         group=None, *, kernel="auto") -> AttentionResult:
    """Ring attention; rank r holds the r-th of N equal stretches of the sequence."""
    return _attention("ring", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic)


def ring_flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                  alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                  group=None, *, kernel="auto") -> AttentionResult:
    """ring_flash_attn_func with kv: (B, S_local, 2, HK, D)."""
    k, v = _split_packed("kv", kv, 2)
    return ring_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                deterministic, return_attn_probs, group, kernel=kernel)


def ring_flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                   alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                   group=None, *, kernel="auto") -> AttentionResult:
    """ring_flash_attn_func with qkv: (B, S_local, 3, H, D)."""
    q, k, v = _split_packed("qkv", qkv, 3)
    return ring_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                deterministic, return_attn_probs, group, kernel=kernel)


def zigzag_ring_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                group=None, *, kernel="auto") -> AttentionResult:
    """Zigzag ring attention; the sequence is cut into 2N chunks and rank r holds chunks r and 2N-1-r."""
    return _attention("zigzag", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic)


def zigzag_ring_flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                                         window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                                         return_attn_probs=False, group=None, *, kernel="auto") -> AttentionResult:
    """zigzag_ring_flash_attn_func with kv: (B, S_local, 2, HK, D)."""
    k, v = _split_packed("kv", kv, 2)
    return zigzag_ring_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                       deterministic, return_attn_probs, group, kernel=kernel)


def zigzag_ring_flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                                          window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                                          return_attn_probs=False, group=None, *, kernel="auto") -> AttentionResult:
    """zigzag_ring_flash_attn_func with qkv: (B, S_local, 3, H, D)."""
    q, k, v = _split_packed("qkv", qkv, 3)
    return zigzag_ring_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                       deterministic, return_attn_probs, group, kernel=kernel)


def stripe_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           alibi_slopes=None, deterministic=False, return_attn_probs=False,
                           group=None, *, kernel="auto") -> AttentionResult:
    """Striped attention; rank r holds tokens r, r + N, r + 2N, ... of the sequence, so that under a
    causal mask every rank has the same work at every step of the ring. A causal mask or none (a
    sliding window is refused)."""
    return _attention("stripe", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic)


def stripe_flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                    group=None, *, kernel="auto") -> AttentionResult:
    """stripe_flash_attn_func with kv: (B, S_local, 2, HK, D)."""
    k, v = _split_packed("kv", kv, 2)
    return stripe_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                  deterministic, return_attn_probs, group, kernel=kernel)


def stripe_flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                     alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                     group=None, *, kernel="auto") -> AttentionResult:
    """stripe_flash_attn_func with qkv: (B, S_local, 3, H, D)."""
    q, k, v = _split_packed("qkv", qkv, 3)
    return stripe_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                  deterministic, return_attn_probs, group, kernel=kernel)


def ulysses_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                      alibi_slopes=None, deterministic=False, return_attn_probs=False,
                      group=None, *, kernel="auto") -> AttentionResult:
    """Ulysses: all-to-all from sequence shards to head shards and back (H % N == 0); contiguous layout."""
    return _attention("ulysses", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic)


def hamilton_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                       alibi_slopes=None, deterministic=False, return_attn_probs=False,
                       group=None, *, kernel="auto") -> AttentionResult:
    """Hamiltonian-cycle attention (TASP); zigzag layout when causal, else contiguous. N is not 4 or 6."""
    return _attention("hamilton", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic)


def hamilton2_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        alibi_slopes=None, deterministic=False, return_attn_probs=False,
                        group=None, *, nodes: int, kernel="auto") -> AttentionResult:
    """Two-level Hamiltonian attention for `nodes` nodes of m = N / nodes consecutive ranks (m even,
    or 1): m slots per step, one of them across nodes; zigzag layout when causal, else contiguous."""
    return _attention("hamilton2", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic, nodes=nodes)


def allgather_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        alibi_slopes=None, deterministic=False, return_attn_probs=False,
                        group=None, *, kernel="auto") -> AttentionResult:
    """All-gather attention (Llama 3 style) over the zigzag layout."""
    return _attention("allgather", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic)


def usp_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                  alibi_slopes=None, deterministic=False, return_attn_probs=False,
                  group=None, *, inner: int = 0, across: str = "zigzag", kernel="auto") -> AttentionResult:
    """USP: Ulysses inside groups of `inner` consecutive ranks (0: the largest degree dividing N, H and
    HK), then `across` ("zigzag", "ring" or "hamilton") over the N / inner groups."""
    return _attention("usp", q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                      return_attn_probs, group, kernel, deterministic=deterministic, inner=inner, across=across)


# The function of each algorithm that takes separate q, k, v and no degree it cannot default
# (hamilton2_attn_func needs nodes=).
ATTENTION_FUNCTIONS = {
    "ring": ring_flash_attn_func,
    "zigzag": zigzag_ring_flash_attn_func,
    "stripe": stripe_flash_attn_func,
    "ulysses": ulysses_attn_func,
    "hamilton": hamilton_attn_func,
    "allgather": allgather_attn_func,
    "usp": usp_attn_func,
}


def attention_function(algorithm: str):
    """The function of `algorithm` (e.g. the name auto_select returns), with ring-flash-attn's signature."""
    try:
        return ATTENTION_FUNCTIONS[algorithm]
    except KeyError:
        hint = " (hamilton2_attn_func takes nodes=)" if algorithm == "hamilton2" else ""
        raise ValueError(f"algorithm {algorithm!r} has no function of ring-flash-attn's signature{hint}; allowed: "
                         f"{', '.join(ATTENTION_FUNCTIONS)}") from None
