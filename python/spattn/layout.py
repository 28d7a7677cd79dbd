"""Which global tokens each rank holds under a strategy, and the helpers that cut a full tensor
into a rank's shard and put shards back together, so nobody reorders tokens by hand.

ring, ulysses: rank r holds the r-th of N equal stretches. zigzag, allgather (and hamilton when
causal): the sequence is cut into 2N chunks and rank r holds chunks r and 2N-1-r. stripe: rank r
holds tokens r, r + N, r + 2N, ... (one chunk of stride N). usp: the across-groups layout, each
group's tokens split contiguously over its ranks.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from .communicator import communicator_for
from .distributed import default_device
from .plans import get_plan


class SequenceLayout:
    """The layout of one plan: `chunks(rank)` as (position, length, local_offset) in shard order,
    the tokens of a chunk `position_stride` apart."""

    def __init__(self, plan) -> None:
        self._plan = plan

    @property
    def name(self) -> str:
        """e.g. "zigzag" or "zigzag over 2 groups of 2 ranks"."""
        return self._plan.layout_name

    @property
    def global_length(self) -> int:
        return self._plan.global_length

    @property
    def local_length(self) -> int:
        return self._plan.local_length

    @property
    def ranks(self) -> int:
        return self._plan.ranks

    @property
    def position_stride(self) -> int:
        """The distance between the global positions of a chunk's consecutive tokens: N for
        stripe, 1 for every other layout."""
        return self._plan.position_stride

    def chunks(self, rank: int) -> List[Tuple[int, int, int]]:
        """(global position of the first token, length, offset in the shard) of each chunk `rank` holds."""
        return self._plan.chunks(rank)

    def positions(self, rank: int) -> torch.Tensor:
        """The global positions of `rank`'s tokens, in shard order: (local_length,) int64."""
        stride = self.position_stride
        return torch.cat([torch.arange(position, position + stride * length, stride)
                          for position, length, _ in self.chunks(rank)])

    def shard(self, full: torch.Tensor, rank: int, dim: int = 1) -> torch.Tensor:
        """`rank`'s shard of `full`, whose dimension `dim` is the whole sequence (1 for
        (B, S, H, D), 2 for lse (B, H, S)). Differentiable."""
        self._check_length("full", full, dim, self.global_length)
        return full.index_select(dim, self.positions(rank).to(full.device))

    def unshard(self, shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
        """The full tensor from every rank's shard, in rank order (the inverse of shard). Differentiable."""
        if len(shards) != self.ranks:
            raise ValueError(f"unshard got {len(shards)} shards; the layout has {self.ranks} ranks")
        for rank, shard in enumerate(shards):
            self._check_length(f"shard {rank}", shard, dim, self.local_length)
        order = torch.cat([self.positions(rank) for rank in range(self.ranks)])
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel())
        return torch.cat(list(shards), dim=dim).index_select(dim, inverse.to(shards[0].device))

    @staticmethod
    def _check_length(name: str, tensor: torch.Tensor, dim: int, expected: int) -> None:
        if tensor.dim() <= dim or tensor.shape[dim] != expected:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}; expected {expected} tokens in dimension {dim}")

    def __repr__(self) -> str:
        return f"SequenceLayout({self.name!r}, global_length={self.global_length}, ranks={self.ranks})"


def sequence_layout(algorithm: str, seq_len: int, heads: int, kv_heads: Optional[int] = None, *,
                    causal: bool = False, group: Any = None, device: Optional[torch.device] = None,
                    nodes: int = 1, inner: int = 0, across: str = "zigzag") -> SequenceLayout:
    """The layout that `algorithm` ("ring", "zigzag", "stripe", "ulysses", "hamilton", "hamilton2",
    "allgather", "usp") uses for a global sequence of `seq_len` tokens with these head counts,
    mask and degrees (`nodes` of hamilton2; `inner`, `across` of usp), over `group` for tensors on
    `device` (default: the current CUDA device where spattn.setup_distributed chose CUDA, else the
    CPU). Collective (it makes a plan): call it on every rank. Raises
    spattn.SpattnError when seq_len does not split this way, naming the nearest lengths that do."""
    device = torch.device(device) if device is not None else default_device()
    communicator = communicator_for(device, group)
    world_size = communicator.size
    if seq_len % world_size:
        raise ValueError(f"seq_len {seq_len} is not divisible by the {world_size} ranks")
    # A plan of the smallest shape the device's kernels take: the layout depends on none of it.
    dtype, head_dim = ("bf16", 8) if device.type == "cuda" else ("fp32", 1)
    plan = get_plan(communicator, algorithm, batch=1, local_seq=seq_len // world_size, heads=heads,
                    kv_heads=heads if kv_heads is None else kv_heads, head_dim=head_dim, dtype=dtype, causal=causal,
                    nodes=nodes, inner=inner, across=across)
    return SequenceLayout(plan)
