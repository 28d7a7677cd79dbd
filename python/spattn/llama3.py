"""ring-flash-attn's llama3 functions: packed sequences split over the ranks as one whole
sequence, contiguously (Llama 3's context parallelism), with its names and arguments.

    cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, local_k_slice = (
        spattn.llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, causal, rank, world_size))
    out = spattn.llama3_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                               max_seqlen_k, heads_k_stride, local_k_slice, causal=causal)

`cu_seqlens` are the global cumulative lengths of the packed sequences (0 first, T last, T a
multiple of N) and rank r holds tokens [r T/N, (r+1) T/N) of their concatenation, so a sequence
may be cut anywhere by the ranks' boundaries: q is (T/N, H, D), k and v (T/N, HK, D). A query sees
only keys of its own sequence (and the mask applies within it, in positions of the sequence).
Returns out (T/N, H, D), or (out, lse, None) with lse (H, T/N) fp32 when return_attn_probs is set;
gradients flow to q, k and v.

spattn runs its all-gather strategy over the whole sequence (AttentionOptions::document_split
whole_sequence), which needs the global lengths on every rank: llama3_flash_attn_prepare_cu_seqlens
records them under the values it returns, so pass those on unchanged. heads_k_stride, max_seqlen_q
and max_seqlen_k are accepted for the signature (spattn gathers the kv heads in groups of its own).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Any, List, Optional, Tuple

import torch

from .communicator import communicator_for, raise_on_every_rank
from .functional import AttentionResult, _attention
from .host_values import host_values, remember_host_values
from .varlen import _split_packed

# The global lengths behind each preparation, under what it returned to this rank: the varlen
# functions get only this rank's view. The last few are kept (a run prepares once per batch).
_prepared: "OrderedDict[Tuple[Any, ...], Tuple[int, ...]]" = OrderedDict()
PREPARATIONS_KEPT = 16


def _preparation_key(cu_seqlens_q: Any, cu_seqlens_k: Any, local_k_slice: Any) -> Optional[Tuple[Any, ...]]:
    if not all(isinstance(x, torch.Tensor) for x in (cu_seqlens_q, cu_seqlens_k)) or not isinstance(local_k_slice,
                                                                                                    slice):
        return None
    return (host_values(cu_seqlens_q), host_values(cu_seqlens_k), local_k_slice.start, local_k_slice.stop)


def _global_starts(cu_seqlens: Any, world_size: int) -> List[int]:
    """cu_seqlens as a list, after checking that it describes packed sequences that split over
    `world_size` ranks; ValueError or TypeError naming the value otherwise."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point:
        raise TypeError("cu_seqlens must be a 1-D integer torch.Tensor of global cumulative lengths; "
                        f"got {cu_seqlens!r}")
    starts = [int(x) for x in cu_seqlens.tolist()]
    if len(starts) < 2 or starts[0] != 0:
        raise ValueError(f"cu_seqlens {starts} must start at 0 and hold at least one sequence")
    for index, (start, end) in enumerate(zip(starts, starts[1:])):
        if end <= start:
            raise ValueError(f"sequence {index} has length {end - start} (cu_seqlens {starts}); every sequence needs "
                             "at least 1 token")
    if starts[-1] % world_size:
        raise ValueError(f"the packed sequences have {starts[-1]} tokens, which do not split over {world_size} ranks; "
                         f"pad them to a multiple of {world_size} (llama3 splits them contiguously)")
    return starts


def llama3_flash_attn_prepare_cu_seqlens(cu_seqlens: torch.Tensor, causal: bool, rank: int, world_size: int):
    """This rank's view of the packed sequences of global `cu_seqlens`, as ring-flash-attn returns
    it: (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, local_k_slice). cu_seqlens_q cuts
    the rank's stretch [r T/N, (r+1) T/N) at sequence boundaries; cu_seqlens_k and local_k_slice
    give the keys its queries need in the gathered sequence, from the start of its first sequence
    to the end of its stretch (causal) or of its last sequence."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of the {world_size} ranks 0..{world_size - 1}")
    starts = _global_starts(cu_seqlens, world_size)
    per_rank = starts[-1] // world_size
    begin, end = rank * per_rank, (rank + 1) * per_rank
    first = bisect.bisect_right(starts, begin) - 1  # the sequence that holds the stretch's first token
    last = bisect.bisect_right(starts, end - 1) - 1  # ... and its last
    q_bounds = [0] + [start - begin for start in starts[first + 1:last + 1]] + [per_rank]
    k_begin, k_end = starts[first], end if causal else starts[last + 1]
    k_bounds = [start - k_begin for start in starts[first:last + 1]] + [k_end - k_begin]
    as_tensor = lambda bounds: torch.tensor(bounds, dtype=cu_seqlens.dtype, device=cu_seqlens.device)  # noqa: E731
    cu_seqlens_q, cu_seqlens_k = as_tensor(q_bounds), as_tensor(k_bounds)
    remember_host_values(cu_seqlens_q, q_bounds)  # the varlen calls never read them back from the device
    remember_host_values(cu_seqlens_k, k_bounds)
    local_k_slice = slice(k_begin, k_end)
    key = _preparation_key(cu_seqlens_q, cu_seqlens_k, local_k_slice)
    _prepared[key] = tuple(end - start for start, end in zip(starts, starts[1:]))
    _prepared.move_to_end(key)
    while len(_prepared) > PREPARATIONS_KEPT:
        _prepared.popitem(last=False)
    max_length = lambda bounds: max(b - a for a, b in zip(bounds, bounds[1:]))  # noqa: E731
    return cu_seqlens_q, cu_seqlens_k, max_length(q_bounds), max_length(k_bounds), local_k_slice


def _prepared_lengths_error(q: Any, k: Any, heads_k_stride: Any, key: Optional[Tuple[Any, ...]],
                            ranks: int) -> Optional[Exception]:
    """What is wrong with this rank's arguments, or None."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        return ValueError(f"q has shape {shape}; expected 3 dimensions (T/N, H, D), this rank's stretch")
    if key not in _prepared:
        return ValueError("cu_seqlens_q, cu_seqlens_k and local_k_slice are not values that "
                          "llama3_flash_attn_prepare_cu_seqlens returned on this rank (it records the global lengths "
                          "spattn needs): pass them on as it returned them")
    kv_heads = k.shape[1] if isinstance(k, torch.Tensor) and k.dim() == 3 else None
    if not isinstance(heads_k_stride, int) or heads_k_stride < 1 or (kv_heads and kv_heads % heads_k_stride):
        return ValueError(f"heads_k_stride {heads_k_stride!r} must be a positive divisor of the {kv_heads} kv heads")
    if q.shape[0] * ranks != sum(_prepared[key]):
        return ValueError(f"q holds {q.shape[0]} tokens; the prepared sequences have {sum(_prepared[key])} tokens, "
                          f"{sum(_prepared[key]) // ranks} on each of the {ranks} ranks")
    return None


def llama3_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, heads_k_stride,
                                  local_k_slice, dropout_p=0.0, softmax_scale=None, causal=False,
                                  window_size=(-1, -1), alibi_slopes=None, deterministic=False,
                                  return_attn_probs=False, group=None, *, kernel="auto") -> AttentionResult:
    """Attention over packed sequences split as one whole sequence; q: (T/N, H, D), k, v: (T/N, HK, D)."""
    device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    communicator = communicator_for(device, group)
    key = _preparation_key(cu_seqlens_q, cu_seqlens_k, local_k_slice)
    raise_on_every_rank(_prepared_lengths_error(q, k, heads_k_stride, key, communicator.size), communicator)
    batched = [x.unsqueeze(0) if isinstance(x, torch.Tensor) else x for x in (q, k, v)]  # (1, T/N, heads, D)
    out, lse, _ = _attention("allgather", *batched, dropout_p, softmax_scale, causal, window_size, alibi_slopes, True,
                             group, kernel, document_lengths=_prepared[key], document_split="whole_sequence",
                             deterministic=deterministic)
    out, lse = out.squeeze(0), lse.squeeze(0)  # (T/N, H, D), (H, T/N)
    return (out, lse, None) if return_attn_probs else out


def llama3_flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                           heads_k_stride, local_k_slice, dropout_p=0.0, softmax_scale=None,
                                           causal=False, window_size=(-1, -1), alibi_slopes=None,
                                           deterministic=False, return_attn_probs=False, group=None, *,
                                           kernel="auto") -> AttentionResult:
    """llama3_flash_attn_varlen_func with kv: (T/N, 2, HK, D)."""
    k, v = _split_packed("kv", kv, 2)
    return llama3_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                         heads_k_stride, local_k_slice, dropout_p, softmax_scale, causal, window_size,
                                         alibi_slopes, deterministic, return_attn_probs, group, kernel=kernel)


def llama3_flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                            heads_k_stride, local_k_slice, dropout_p=0.0, softmax_scale=None,
                                            causal=False, window_size=(-1, -1), alibi_slopes=None,
                                            deterministic=False, return_attn_probs=False, group=None, *,
                                            kernel="auto") -> AttentionResult:
    """llama3_flash_attn_varlen_func with qkv: (T/N, 3, H, D)."""
    q, k, v = _split_packed("qkv", qkv, 3)
    return llama3_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                         heads_k_stride, local_k_slice, dropout_p, softmax_scale, causal, window_size,
                                         alibi_slopes, deterministic, return_attn_probs, group, kernel=kernel)
