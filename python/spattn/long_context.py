"""yunchang's USP interface over spattn's usp strategy: set_seq_parallel_pg, then LongContextAttention.

A yunchang user changes the import (`from spattn import set_seq_parallel_pg, LongContextAttention`)
and keeps the rest: the same process-group setup, the same module arguments, the same token layout
per rank. Ulysses runs inside groups of sp_ulysses_degree consecutive ranks and ring or zigzag
across the sp_ring_degree groups, which is yunchang's layout with use_ulysses_low=True:
- ring_impl_type "basic": rank r of the sequence-parallel group holds the r-th of its N equal
  stretches (yunchang's basic_extract_local);
- "zigzag": the sequence is cut into 2 * sp_ring_degree chunks, ring rank g's group holds chunks
  g and 2 * sp_ring_degree - 1 - g, split contiguously over its Ulysses ranks (yunchang's
  zigzag_extract_local).
spattn.sequence_layout("usp", ..., inner=sp_ulysses_degree, across="ring" or "zigzag") gives the
same positions. What spattn does not have (the stripe layout, Ulysses over strided ranks) is refused
by name.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
import torch.distributed as dist

from .functional import AttentionResult, usp_attn_func
from .modules import refuse_unsupported_call_arguments

_HEAD_DIM = 2
_SEQUENCE_DIM = 1
# yunchang's ring_impl_type -> the strategy spattn runs across the Ulysses groups.
RING_IMPLEMENTATIONS = {"basic": "ring", "basic_pytorch": "ring", "zigzag": "zigzag"}


class ProcessGroups:
    """The groups set_seq_parallel_pg made for this rank (yunchang's PROCESS_GROUP): ULYSSES_PG
    (its Ulysses group), RING_PG (its ring group), and SP_PG (both together: the group of its
    sequence-parallel replica, which spattn's usp runs over) with the Ulysses degree."""

    def __init__(self) -> None:
        self.ULYSSES_PG: Any = None
        self.RING_PG: Any = None
        self.SP_PG: Any = None
        self.ulysses_degree = 0


PROCESS_GROUP = ProcessGroups()


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}; expected a positive int")
    return value


def sequence_parallel_ranks(sp_ulysses_degree: int, sp_ring_degree: int, world_size: int) -> List[List[int]]:
    """The ranks of each sequence-parallel replica: world_size / (ulysses x ring) runs of
    consecutive ranks; inside each, Ulysses groups are consecutive ranks and ring groups strided."""
    sp_degree = sp_ulysses_degree * sp_ring_degree
    return [list(range(offset, offset + sp_degree)) for offset in range(0, world_size, sp_degree)]


def set_seq_parallel_pg(sp_ulysses_degree: int, sp_ring_degree: int, rank: int, world_size: int,
                        use_ulysses_low: bool = True) -> None:
    """Makes this rank's process groups as yunchang does (collective: call it on every rank with the
    same degrees): Ulysses groups of sp_ulysses_degree consecutive ranks, ring groups of the ranks
    sp_ulysses_degree apart, one sequence-parallel replica per sp_ulysses_degree x sp_ring_degree
    consecutive ranks. Needs torch.distributed to be initialized (spattn.setup_distributed())."""
    sp_ulysses_degree = _positive_int("sp_ulysses_degree", sp_ulysses_degree)
    sp_ring_degree = _positive_int("sp_ring_degree", sp_ring_degree)
    world_size = _positive_int("world_size", world_size)
    if not use_ulysses_low:
        raise ValueError("use_ulysses_low=False is not supported: spattn's usp runs Ulysses over groups of "
                         "consecutive ranks (the fast links) and ring across them; allowed: True")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("set_seq_parallel_pg makes torch.distributed groups: call spattn.setup_distributed() "
                           "(or torch.distributed.init_process_group) first")
    if world_size != dist.get_world_size():
        raise ValueError(f"world_size={world_size} but torch.distributed has {dist.get_world_size()} ranks")
    if not isinstance(rank, int) or rank != dist.get_rank():
        raise ValueError(f"rank={rank!r} but this process is rank {dist.get_rank()} of torch.distributed")
    sp_degree = sp_ulysses_degree * sp_ring_degree
    if world_size % sp_degree:
        raise ValueError(f"world_size={world_size} is not a multiple of sp_ulysses_degree x sp_ring_degree = "
                         f"{sp_ulysses_degree} x {sp_ring_degree} = {sp_degree}")
    # new_group is collective over every rank, in the same order everywhere: each rank makes every
    # group and keeps its own.
    for replica in sequence_parallel_ranks(sp_ulysses_degree, sp_ring_degree, world_size):
        sp_group = dist.new_group(replica)
        if rank in replica:
            PROCESS_GROUP.SP_PG = sp_group
        for first in range(0, sp_degree, sp_ulysses_degree):
            ranks = replica[first:first + sp_ulysses_degree]
            group = dist.new_group(ranks)
            if rank in ranks:
                PROCESS_GROUP.ULYSSES_PG = group
        for first in range(sp_ulysses_degree):
            ranks = replica[first::sp_ulysses_degree]
            group = dist.new_group(ranks)
            if rank in ranks:
                PROCESS_GROUP.RING_PG = group
    PROCESS_GROUP.ulysses_degree = sp_ulysses_degree


class LongContextAttention(torch.nn.Module):
    """yunchang's USP module: Ulysses inside the groups set_seq_parallel_pg made, ring_impl_type
    ("basic" or "zigzag") across them, on (B, S_local, H, D) shards in yunchang's token layout
    (module docstring). H and HK must be multiples of sp_ulysses_degree.

    `use_pack_qkv` and `use_sync` are accepted and change nothing (spattn packs and orders its
    transfers itself), and so is `attn_type`: spattn computes every block with its own kernels,
    on CUDA `kernel`'s ("auto", "own" or "cudnn", see spattn.functional). Unlike yunchang's,
    forward with return_attn_probs=True returns (out, lse, None) as flash-attn does, lse
    (B, H, S_local) fp32, instead of dropping lse.
    """

    def __init__(self, scatter_idx: int = _HEAD_DIM, gather_idx: int = _SEQUENCE_DIM, ring_impl_type: str = "basic",
                 use_pack_qkv: bool = False, use_sync: bool = False, attn_type: Any = None,
                 attn_processor: Any = None, *, kernel: str = "auto") -> None:
        super().__init__()
        if PROCESS_GROUP.SP_PG is None:
            raise RuntimeError("LongContextAttention runs over the groups of set_seq_parallel_pg: call "
                               "spattn.set_seq_parallel_pg(sp_ulysses_degree, sp_ring_degree, rank, world_size) first")
        if (scatter_idx, gather_idx) != (_HEAD_DIM, _SEQUENCE_DIM):
            raise ValueError(f"scatter_idx={scatter_idx}, gather_idx={gather_idx}: LongContextAttention takes "
                             f"(B, S_local, H, D) tensors; allowed: scatter_idx={_HEAD_DIM}, gather_idx={_SEQUENCE_DIM}")
        if ring_impl_type not in RING_IMPLEMENTATIONS:
            hint = " (the stripe layout is not in spattn yet)" if ring_impl_type == "strip" else ""
            raise ValueError(f"ring_impl_type={ring_impl_type!r}{hint}; allowed: {', '.join(RING_IMPLEMENTATIONS)}")
        if attn_processor is not None:
            raise ValueError("attn_processor is not supported: spattn computes every block with its own kernels; "
                             "allowed: None")
        self.ring_pg = PROCESS_GROUP.RING_PG
        self.ulysses_pg = PROCESS_GROUP.ULYSSES_PG
        self.sequence_parallel_pg = PROCESS_GROUP.SP_PG
        self.ulysses_degree = PROCESS_GROUP.ulysses_degree
        self.scatter_idx = scatter_idx
        self.gather_idx = gather_idx
        self.ring_impl_type = ring_impl_type
        self.across = RING_IMPLEMENTATIONS[ring_impl_type]
        self.kernel = kernel
        # Accepted for yunchang's signature; spattn packs and orders its transfers itself.
        self.use_pack_qkv, self.use_sync, self.attn_type = use_pack_qkv, use_sync, attn_type

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
                softmax_scale: Optional[float] = None, causal: bool = False,
                window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                return_attn_probs: bool = False, *args: Any) -> AttentionResult:
        """query (B, S_local, H, D), key and value (B, S_local, HK, D) -> (B, S_local, H, D)."""
        refuse_unsupported_call_arguments("LongContextAttention", softcap, args)
        return usp_attn_func(query, key, value, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                             deterministic, return_attn_probs, self.sequence_parallel_pg, inner=self.ulysses_degree,
                             across=self.across, kernel=self.kernel)
