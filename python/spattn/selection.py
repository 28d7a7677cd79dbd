"""auto_select: the strategy spattn's cost model expects to be fastest for a shape on a cluster.

The model (src/schedule/cost_model.hpp) counts what every strategy sends and computes per step on
a preset cluster (NVSwitch node, two such nodes, or an xGMI-style full mesh) and skips those whose
preconditions fail (head counts for Ulysses, a Hamiltonian decomposition, divisibility of the
sequence), so the choice is one that runs.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional

import torch

from . import _core
from .communicator import group_size
from .plans import dtype_name


class StrategyEstimate(NamedTuple):
    algorithm: str
    configuration: str  # slots, or how usp and hamilton2 split the ranks
    forward_seconds: float
    forward_backward_seconds: float
    not_applicable: str  # why it cannot run this case; "" when it can


def estimate_strategies(seq_len: int, heads: int, kv_heads: Optional[int] = None, head_dim: int = 128, *,
                        world_size: Optional[int] = None, causal: bool = True, batch: int = 1,
                        dtype: torch.dtype = torch.bfloat16, cluster: str = "nvswitch",
                        group=None) -> List[StrategyEstimate]:
    """Every algorithm's modelled time for this global shape on `world_size` ranks (default: the
    world of `group`), those that apply first, fastest first. `cluster` is one of
    _core.cluster_presets()."""
    ranks = group_size(group) if world_size is None else world_size
    if cluster not in _core.cluster_presets():
        raise ValueError(f"cluster {cluster!r}; allowed: {', '.join(_core.cluster_presets())}")
    if ranks < 2:
        raise ValueError(f"world_size {ranks}: strategies differ only on 2 or more ranks")
    rows = _core.estimate_strategies(cluster, ranks, batch, seq_len, heads, heads if kv_heads is None else kv_heads,
                                     head_dim, dtype_name("dtype", dtype), causal)
    return [StrategyEstimate(*row) for row in rows]


def auto_select(seq_len: int, heads: int, kv_heads: Optional[int] = None, head_dim: int = 128, *,
                world_size: Optional[int] = None, causal: bool = True, batch: int = 1,
                dtype: torch.dtype = torch.bfloat16, cluster: str = "nvswitch", group=None) -> str:
    """The name of the algorithm ("zigzag", "ulysses", ...) with the least modelled forward and
    backward time among those that can run this shape; "ring" on a single rank, where every
    strategy is the same local attention. Raises ValueError when none applies, with each one's
    reason."""
    ranks = group_size(group) if world_size is None else world_size
    if ranks == 1:
        return "ring"
    estimates = estimate_strategies(seq_len, heads, kv_heads, head_dim, world_size=ranks, causal=causal, batch=batch,
                                    dtype=dtype, cluster=cluster)
    runnable = [estimate for estimate in estimates if not estimate.not_applicable]
    # hamilton2 needs nodes of several ranks; its functional wrapper is not in this package.
    runnable = [estimate for estimate in runnable if estimate.algorithm != "hamilton2"]
    if not runnable:
        reasons = "; ".join(f"{estimate.algorithm}: {estimate.not_applicable}" for estimate in estimates)
        raise ValueError(f"no strategy runs seq_len {seq_len} with {heads} heads on {ranks} ranks: {reasons}")
    return runnable[0].algorithm
