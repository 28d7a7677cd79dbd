"""Packed variable-length sequences with ring-flash-attn's varlen names and arguments.

Every function takes this rank's part of every sequence, packed one after another in flash-attn's
varlen layout, q: (T_local, H, D) and k, v: (T_local, HK, D), with `cu_seqlens` the local
cumulative lengths (1-D integers, 0 first and T_local last), as ring-flash-attn does: each
sequence is split over the N ranks on its own, so that every rank holds an equal part of it.
ring_*: rank r holds the r-th of N equal parts of every sequence. zigzag_*: every sequence is
cut into 2N equal parts and rank r holds parts r and 2N-1-r, which balances causal work, so its
local lengths are even. A query sees only keys of its own sequence (and the mask applies within
it). Returns out: (T_local, H, D), or (out, lse, None) with lse: (H, T_local) fp32 when
return_attn_probs is set; gradients flow to q, k and v.

`max_seqlen` is accepted for the signature and not needed. Beyond ring-flash-attn's arguments,
every function takes the keyword `kernel`, as spattn.functional's do. Each new packing makes a new
plan (collective), of which spattn.plans keeps the last few.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from .communicator import communicator_for, raise_on_every_rank
from .functional import AttentionResult, _attention
from .host_values import host_values


def _local_lengths_error(algorithm: str, q: Any, cu_seqlens: Any) -> Optional[Exception]:
    """What is wrong with this rank's q and cu_seqlens, or None."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        return ValueError(f"q has shape {shape}; expected 3 dimensions (T_local, H, D), the sequences packed")
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point:
        return TypeError("cu_seqlens must be a 1-D integer torch.Tensor of cumulative local lengths "
                         f"(0 first, T_local last); got {cu_seqlens!r}")
    starts = list(host_values(cu_seqlens))
    if len(starts) < 2 or starts[0] != 0 or starts[-1] != q.shape[0]:
        return ValueError(f"cu_seqlens {starts} must start at 0 and end at T_local = {q.shape[0]} (q's first "
                          "dimension), with at least one sequence")
    for index, (start, end) in enumerate(zip(starts, starts[1:])):
        if end - start < 1:
            return ValueError(f"sequence {index} has local length {end - start} (cu_seqlens {starts}); every "
                              "sequence needs at least 1 token on each rank")
        if algorithm == "zigzag" and (end - start) % 2:
            return ValueError(f"sequence {index} has local length {end - start} (cu_seqlens {starts}); zigzag holds "
                              "two equal parts of every sequence, so every local length must be even")
    return None


def _split_packed(name: str, packed: Any, parts: int) -> Tuple[torch.Tensor, ...]:
    # (T_local, parts, heads, D) -> parts tensors of (T_local, heads, D)
    if not isinstance(packed, torch.Tensor) or packed.dim() != 4 or packed.shape[1] != parts:
        shape = tuple(packed.shape) if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise ValueError(f"{name} has shape {shape}; expected (T_local, {parts}, heads, D)")
    return packed.unbind(dim=1)


def _varlen_attention(algorithm: str, q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                      alibi_slopes, return_attn_probs, group, kernel, deterministic=False) -> AttentionResult:
    device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    communicator = communicator_for(device, group)
    raise_on_every_rank(_local_lengths_error(algorithm, q, cu_seqlens), communicator)
    starts = host_values(cu_seqlens)
    local_lengths = [end - start for start, end in zip(starts, starts[1:])]
    # The plan takes global lengths: every rank holds an equal part of every sequence.
    document_lengths: Tuple[int, ...] = tuple(int(length) * communicator.size for length in local_lengths)
    batched = [x.unsqueeze(0) if isinstance(x, torch.Tensor) else x for x in (q, k, v)]  # (1, T_local, heads, D)
    out, lse, _ = _attention(algorithm, *batched, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                             True, group, kernel, document_lengths=document_lengths, deterministic=deterministic)
    out, lse = out.squeeze(0), lse.squeeze(0)  # (T_local, H, D), (H, T_local)
    return (out, lse, None) if return_attn_probs else out


def ring_flash_attn_varlen_func(q, k, v, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                                return_attn_probs=False, group=None, *, kernel="auto") -> AttentionResult:
    """Ring attention over packed sequences; rank r holds the r-th of N equal parts of each."""
    return _varlen_attention("ring", q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                             alibi_slopes, return_attn_probs, group, kernel, deterministic=deterministic)


def ring_flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                         causal=False, window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                                         return_attn_probs=False, group=None, *, kernel="auto") -> AttentionResult:
    """ring_flash_attn_varlen_func with kv: (T_local, 2, HK, D)."""
    k, v = _split_packed("kv", kv, 2)
    return _varlen_attention("ring", q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                             alibi_slopes, return_attn_probs, group, kernel, deterministic=deterministic)


def ring_flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                          causal=False, window_size=(-1, -1), alibi_slopes=None,
                                          deterministic=False, return_attn_probs=False, group=None, *,
                                          kernel="auto") -> AttentionResult:
    """ring_flash_attn_varlen_func with qkv: (T_local, 3, H, D)."""
    q, k, v = _split_packed("qkv", qkv, 3)
    return _varlen_attention("ring", q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                             alibi_slopes, return_attn_probs, group, kernel, deterministic=deterministic)


def zigzag_ring_flash_attn_varlen_func(q, k, v, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                       causal=False, window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                                       return_attn_probs=False, group=None, *, kernel="auto") -> AttentionResult:
    """Zigzag ring attention over packed sequences; rank r holds parts r and 2N-1-r of 2N of each."""
    return _varlen_attention("zigzag", q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                             alibi_slopes, return_attn_probs, group, kernel, deterministic=deterministic)


def zigzag_ring_flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                                causal=False, window_size=(-1, -1), alibi_slopes=None,
                                                deterministic=False, return_attn_probs=False, group=None, *,
                                                kernel="auto") -> AttentionResult:
    """zigzag_ring_flash_attn_varlen_func with kv: (T_local, 2, HK, D)."""
    k, v = _split_packed("kv", kv, 2)
    return _varlen_attention("zigzag", q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                             alibi_slopes, return_attn_probs, group, kernel, deterministic=deterministic)


def zigzag_ring_flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                                 causal=False, window_size=(-1, -1), alibi_slopes=None,
                                                 deterministic=False, return_attn_probs=False, group=None, *,
                                                 kernel="auto") -> AttentionResult:
    """zigzag_ring_flash_attn_varlen_func with qkv: (T_local, 3, H, D)."""
    q, k, v = _split_packed("qkv", qkv, 3)
    return _varlen_attention("zigzag", q, k, v, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                             alibi_slopes, return_attn_probs, group, kernel, deterministic=deterministic)
