"""sp_aurora's names over spattn's plans (issue 21, item 6): code written for sp_aurora, the Intel
GPU port of ring flash attention that spattn grew from, runs on spattn by changing its import from
`sp_aurora` to `spattn.sp_aurora`. Names, argument order, defaults and return values are sp_aurora's
(docs/compat/sp-aurora-api.md); what runs is spattn's exact attention, forward and backward, on
CPUs over MPI or NVIDIA GPUs over NCCL.

Where sp_aurora and its documentation differ, both spellings work: its documentation calls the
ring functions sp_aurora_func, sp_aurora_kvpacked_func and sp_aurora_qkvpacked_func, its code
exports them as ring_flash_attn_*. This build has no SYCL backend, and is_sycl_available() says so.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core
from .distributed import launch_environment, setup_distributed
from .functional import (ring_flash_attn_func, ring_flash_attn_kvpacked_func, ring_flash_attn_qkvpacked_func,
                         ulysses_attn_func)
from .modules import UlyssesAttention

sp_aurora_func = ring_flash_attn_func
sp_aurora_kvpacked_func = ring_flash_attn_kvpacked_func
sp_aurora_qkvpacked_func = ring_flash_attn_qkvpacked_func

_NO_SYCL = "this spattn build has no SYCL backend (spattn runs on CPUs and NVIDIA GPUs)"


class AttnType(str, Enum):
    """sp_aurora's (and yunchang's) choice of the attention under Ulysses. spattn computes every
    block with its own kernels whichever is named, as UlyssesAttention documents."""

    TORCH = "torch"
    INTEL_SYCL = "intel_sycl"
    INTEL_ONEDNN = "intel_onednn"
    FA = "flash_attn"
    FA3 = "flash_attn_3"


def _launcher() -> str:
    """sp_aurora's rule: torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; an MPI
    launcher its own rank variable (spattn's setup exports RANK under mpiexec too, not the others)."""
    if all(name in os.environ for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return "torchrun"
    if any(name in os.environ for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")):
        return "mpiexec"
    return "single"


def setup_mpi_distributed(backend: Optional[str] = None) -> Dict[str, Any]:
    """Initializes torch.distributed under torchrun or mpiexec (or for a single process) and
    returns sp_aurora's dict: rank, world_size, local_rank, device (the torch.device this rank
    runs on), launcher ("torchrun", "mpiexec" or "single") and backend (torch.distributed's)."""
    launcher = _launcher()
    rank, world_size, device = setup_distributed(backend)
    return {"rank": rank, "world_size": world_size, "local_rank": launch_environment().local_rank,
            "device": device, "launcher": launcher, "backend": dist.get_backend() if dist.is_initialized() else None}


def is_sycl_available() -> bool:
    """False: spattn has no SYCL backend (yet; shared/design/architecture.md keeps the algorithms
    device-agnostic for it)."""
    return False


def get_sycl_device_info() -> Dict[str, str]:
    """sp_aurora's answer when it finds no SYCL device: {"error": why}."""
    return {"error": _NO_SYCL}


def ulysses_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                            alibi_slopes=None, deterministic=False, return_attn_probs=False, group=None):
    """Ulysses attention on (B, S_local, H, D) shards; out, or (out, None) with return_attn_probs:
    sp_aurora returns no lse here (spattn.ulysses_attn_func does)."""
    result = ulysses_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes, deterministic,
                               return_attn_probs, group)
    return (result[0], None) if return_attn_probs else result


def ulysses_flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                     alibi_slopes=None, deterministic=False, return_attn_probs=False, group=None):
    """ulysses_flash_attn_func with kv: (B, S_local, 2, HK, D)."""
    k, v = kv.unbind(dim=2)
    return ulysses_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                   deterministic, return_attn_probs, group)


def ulysses_flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                      alibi_slopes=None, deterministic=False, return_attn_probs=False, group=None):
    """ulysses_flash_attn_func with qkv: (B, S_local, 3, H, D)."""
    q, k, v = qkv.unbind(dim=2)
    return ulysses_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                   deterministic, return_attn_probs, group)


def auto_select_flash_attn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                                   softmax_scale: Optional[float] = None, causal: bool = False,
                                   window_size: Tuple[int, int] = (-1, -1), alibi_slopes: Optional[torch.Tensor] = None,
                                   return_softmax: bool = False, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention on this device alone (no communication), in sp_aurora's layout: q (B, H, S, D),
    k and v (B, HK, S_k, D) -> (out (B, H, S, D) in q's dtype, lse (B, H, S) fp32). sp_aurora picks
    among its SYCL and Python kernels here; spattn takes its own ("auto"), whatever kernel_type
    names. Forward only, as sp_aurora's."""
    kernel_type = kwargs.pop("kernel_type", None)
    if kwargs:
        raise TypeError(f"auto_select_flash_attn_forward got unexpected arguments {sorted(kwargs)}; allowed beside "
                        "the named ones: kernel_type")
    refusals = []
    if dropout_p != 0:
        refusals.append(f"dropout_p={dropout_p!r} is not supported (allowed: 0.0)")
    if alibi_slopes is not None:
        refusals.append(f"alibi_slopes={alibi_slopes!r} is not supported (allowed: None)")
    if return_softmax:
        refusals.append(f"return_softmax={return_softmax!r} is not supported (allowed: False)")
    if not (kernel_type is None or isinstance(kernel_type, str)):
        refusals.append(f"kernel_type={kernel_type!r} is not supported (allowed: any of sp_aurora's names or None)")
    if refusals:
        raise ValueError("auto_select_flash_attn_forward: " + "; ".join(refusals))
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v have shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}; expected "
                         "(B, H, S, D) tensors")
    # spattn's kernels read (B, S, H, D).
    q_rows, k_rows, v_rows = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    out = torch.empty_like(q_rows)
    lse = torch.empty(q.shape[0], q.shape[1], q.shape[2], dtype=torch.float32, device=q.device)
    if q.is_cuda:
        torch.cuda.synchronize()  # the local functions run on a stream of their own
    _core.local_forward(q_rows, k_rows, v_rows, out, lse, causal=causal, window_left=int(window_size[0]),
                        window_right=int(window_size[1]), softmax_scale=softmax_scale)
    return out.transpose(1, 2), lse


__all__ = [
    "AttnType",
    "UlyssesAttention",
    "auto_select_flash_attn_forward",
    "get_sycl_device_info",
    "is_sycl_available",
    "ring_flash_attn_func",
    "ring_flash_attn_kvpacked_func",
    "ring_flash_attn_qkvpacked_func",
    "setup_mpi_distributed",
    "sp_aurora_func",
    "sp_aurora_kvpacked_func",
    "sp_aurora_qkvpacked_func",
    "ulysses_flash_attn_func",
    "ulysses_flash_attn_kvpacked_func",
    "ulysses_flash_attn_qkvpacked_func",
]
