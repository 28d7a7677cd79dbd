"""One cached spattn plan per (algorithm, global shape, dtype, mask, scale, block kernels): a plan
validates and agrees across ranks once and keeps its workspace for the calls after it.

Plan creation is collective, so every rank must ask for the same plans in the same order, as
ranks that run the same model do.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from . import _core
from .communicator import on_release

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

_plans: Dict[Tuple[Any, ...], _core.Plan] = {}
# Plans of packed documents, the most recently used last: a training run packs every batch
# differently, so only the last few are kept (every rank evicts alike, calling alike).
_document_plans: "OrderedDict[Tuple[Any, ...], _core.Plan]" = OrderedDict()
DOCUMENT_PLANS_KEPT = 4


def dtype_name(name: str, dtype: torch.dtype) -> str:
    """spattn's name of a torch dtype; TypeError naming the allowed ones otherwise."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(f"{name} is {dtype}; allowed: torch.float32, torch.float16, torch.bfloat16") from None


def get_plan(communicator: Any, algorithm: str, *, batch: int, local_seq: int, heads: int, kv_heads: int,
             head_dim: int, dtype: str, causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
             softmax_scale: Optional[float] = None, kernel: str = "auto", nodes: int = 1, inner: int = 0,
             across: str = "zigzag", document_lengths: Sequence[int] = (),
             document_split: str = "per_document", deterministic: bool = False) -> _core.Plan:
    """The cached plan of these arguments over `communicator` (communicator.communicator_for), made
    on the first call (collective). `local_seq` is this rank's length; the global length is N
    times it. `kernel`: the block kernels on CUDA, "auto", "own" or "cudnn" (_core.parse_kernel_choice).
    The degrees: `nodes` for hamilton2 (nodes of N/nodes consecutive ranks), `inner` (Ulysses degree,
    0: the largest that divides N, H and HK) and `across` ("zigzag", "ring" or "hamilton") for usp.
    `document_lengths`: the global lengths of packed documents (AttentionOptions::document_lengths),
    whose plans are kept DOCUMENT_PLANS_KEPT at a time, split over the ranks by `document_split`
    ("per_document" or "whole_sequence", AttentionOptions::document_split). `deterministic`: the same
    bits every run (AttentionOptions::deterministic: on CUDA a slower backward)."""
    window_left, window_right = window_size
    documents = tuple(int(length) for length in document_lengths)
    key = (id(communicator), algorithm, batch, local_seq * communicator.size, heads, kv_heads, head_dim, dtype,
           bool(causal), int(window_left), int(window_right), None if softmax_scale is None else float(softmax_scale),
           kernel, int(nodes), int(inner), str(across), documents, document_split, bool(deterministic))
    cache = _document_plans if documents else _plans
    plan = cache.get(key)
    if plan is None:
        plan = _core.Plan(communicator, algorithm, batch, key[3], heads, kv_heads, head_dim, dtype, causal=key[8],
                          window_left=key[9], window_right=key[10], softmax_scale=key[11], nodes=key[13],
                          inner=key[14], across=key[15], kernel=kernel, document_lengths=list(documents),
                          document_split=document_split, deterministic=bool(deterministic))
        cache[key] = plan
    if documents:
        _document_plans.move_to_end(key)
        while len(_document_plans) > DOCUMENT_PLANS_KEPT:
            _document_plans.popitem(last=False)
    return plan


def cached_plan_count() -> int:
    """How many plans this process holds."""
    return len(_plans) + len(_document_plans)


def clear_plan_cache() -> None:
    """Releases every cached plan and its workspace (the next call makes a new one, collectively)."""
    _plans.clear()
    _document_plans.clear()


on_release(clear_plan_cache)
