"""auto_select: the strategy spattn's cost model expects to be fastest for a shape on a cluster.

The model (include/spattn/cost_model.hpp) counts what every strategy sends and computes per step on
a preset cluster (NVSwitch nodes, MI300X-style mesh nodes, PCIe nodes, CPU hosts) of any size and
skips those whose preconditions fail (head counts for Ulysses, a Hamiltonian decomposition,
divisibility of the sequence, nodes of several ranks for hamilton2), so the choice is one that
runs. auto_select returns it as a function to call, its degrees (hamilton2's nodes) bound.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core
from .communicator import group_size
from .functional import ATTENTION_FUNCTIONS, hamilton2_attn_func
from .plans import dtype_name


class StrategyEstimate(NamedTuple):
    algorithm: str
    configuration: str  # slots, or how usp and hamilton2 split the ranks
    forward_seconds: float
    forward_backward_seconds: float
    not_applicable: str  # why it cannot run this case; "" when it can


class SelectedStrategy:
    """auto_select's choice, called like ring-flash-attn's functions: choice(q, k, v, causal=..., ...)
    runs the chosen strategy with the degrees the model chose (`degrees`, e.g. {"nodes": 2} for
    hamilton2) bound. `algorithm` names it, `configuration` says how it splits the ranks."""

    def __init__(self, algorithm: str, configuration: str, degrees: Dict[str, Any]):
        self.algorithm = algorithm
        self.configuration = configuration
        self.degrees = dict(degrees)
        self.function = hamilton2_attn_func if algorithm == "hamilton2" else ATTENTION_FUNCTIONS[algorithm]

    def __call__(self, q, k, v, *args, **kwargs):
        return self.function(q, k, v, *args, **{**self.degrees, **kwargs})

    def __repr__(self) -> str:
        degrees = "".join(f", {name}={value!r}" for name, value in self.degrees.items())
        return f"SelectedStrategy({self.algorithm!r}{degrees}: {self.configuration})"


def _ranks(world_size: Optional[int], group: Any, caller: str) -> int:
    """world_size, else the ranks of `group`; an error, not a silent 1, before any process group."""
    if world_size is not None:
        if world_size < 1:
            raise ValueError(f"world_size={world_size}; allowed: 1 or more")
        return world_size
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{caller} was called before torch.distributed has a process group, so it cannot know "
                           "the ranks: call spattn.setup_distributed() (or torch.distributed.init_process_group) "
                           "first, or pass world_size=N")
    return group_size(group)


def estimate_strategies(seq_len: int, heads: int, kv_heads: Optional[int] = None, head_dim: int = 128, *,
                        world_size: Optional[int] = None, causal: bool = True,
                        window_size: Tuple[int, int] = (-1, -1), batch: int = 1,
                        dtype: torch.dtype = torch.bfloat16, cluster: str = "nvswitch",
                        nodes: Optional[int] = None, group=None) -> List[StrategyEstimate]:
    """Every algorithm's modelled time for this global shape on `world_size` ranks (default: the
    world of `group`), those that apply first, fastest first. `window_size` is flash-attn's
    (left, right), -1 unbounded; `cluster` is one of _core.cluster_presets(); `nodes` how many
    nodes the ranks spread over, equally and in order (default: as many as they fill in nodes of
    the preset's size)."""
    ranks = _ranks(world_size, group, "estimate_strategies")
    if cluster not in _core.cluster_presets():
        raise ValueError(f"cluster {cluster!r}; allowed: {', '.join(_core.cluster_presets())}")
    if ranks < 2:
        raise ValueError(f"world_size {ranks}: strategies differ only on 2 or more ranks")
    if len(window_size) != 2:
        raise ValueError(f"window_size={window_size!r}; expected (left, right), -1 meaning unbounded")
    window_error = _core.window_error(*window_size)
    if window_error:
        raise ValueError(f"window_size={window_size!r}: {window_error}")
    rows = _core.estimate_strategies(cluster, ranks, batch, seq_len, heads, heads if kv_heads is None else kv_heads,
                                     head_dim, dtype_name("dtype", dtype), causal, 0 if nodes is None else nodes,
                                     window_size[0], window_size[1])
    return [StrategyEstimate(*row) for row in rows]


def auto_select(seq_len: int, heads: int, kv_heads: Optional[int] = None, head_dim: int = 128, *,
                world_size: Optional[int] = None, causal: bool = True,
                window_size: Tuple[int, int] = (-1, -1), batch: int = 1,
                dtype: torch.dtype = torch.bfloat16, cluster: str = "nvswitch", nodes: Optional[int] = None,
                group=None) -> SelectedStrategy:
    """The strategy with the least modelled forward and backward time among those that can run this
    shape, as a SelectedStrategy to call with this rank's q, k, v; ring on a single rank, where every
    strategy is the same local attention. `nodes` as in estimate_strategies (hamilton2 runs over
    them). Raises ValueError when none applies, with each one's reason, and RuntimeError when called
    without world_size before torch.distributed has a process group."""
    ranks = _ranks(world_size, group, "auto_select")
    if ranks == 1:
        return SelectedStrategy("ring", "1 rank: local attention", {})
    estimates = estimate_strategies(seq_len, heads, kv_heads, head_dim, world_size=ranks, causal=causal,
                                    window_size=window_size, batch=batch, dtype=dtype, cluster=cluster, nodes=nodes)
    runnable = [estimate for estimate in estimates if not estimate.not_applicable]
    if not runnable:
        reasons = "; ".join(f"{estimate.algorithm}: {estimate.not_applicable}" for estimate in estimates)
        raise ValueError(f"no strategy runs seq_len {seq_len} with {heads} heads on {ranks} ranks: {reasons}")
    best = runnable[0]
    # hamilton2 runs over the nodes the model assumed: the given ones, or those the ranks fill.
    degrees = {}
    if best.algorithm == "hamilton2":
        degrees["nodes"] = nodes if nodes is not None else _core.cluster_nodes(cluster, ranks)
    return SelectedStrategy(best.algorithm, best.configuration, degrees)
