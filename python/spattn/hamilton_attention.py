"""Hamilton Attention / TASP's names over spattn's plans (issue 21, item 6): code written for
infinigence/HamiltonAttention runs on spattn by changing `from hamilton_attention import ...` to
`from spattn.hamilton_attention import ...`. Names, argument order, defaults, return values and
the token layouts of its sharding helpers are the original's (docs/compat/hamilton-attention-api.md);
what runs is spattn's exact attention on CPUs over MPI or NVIDIA GPUs over NCCL.

How the original's inputs become a spattn call. Non-causal K_n and two-node functions: a rank's q is
the concatenation of its chunks and its k, v lists hold the same chunks, and attention without a
mask does not depend on where a token sits, so the lists are concatenated along the sequence and
run through spattn's hamilton plan (hamilton2 for the two-node form; ring where the rank count has
no Hamiltonian decomposition). Causal K_n function: q is the zigzag shard (block r, then block
2n-1-r) and list entry j is sub-chunk j of the front block followed by sub-chunk j of the back
block, so the fronts, then the backs, rebuild the zigzag shard that spattn's causal hamilton plan
(zigzag where it has none) takes.

Where this module differs from the original:
- Gradients flow from out to q and to every k, v entry through spattn's backward; the original is
  forward-only.
- A given softmax_scale0 (softmax_scale) is used; the original leaves its scale unbound unless it is
  None (a NameError inside the call).
- dropout_p must be 0: spattn computes exact attention, and refuses what it cannot compute (the
  original's Hamilton functions ignore dropout_p, its ring functions pass it to flash-attn).
- looping, the mappings and source_rank_per_iter are checked for shape when given but do not change
  the result: spattn's plans route the chunks themselves. When None, they are not computed.
- world_size must equal the group's size in every function that takes it (the original's ring
  and zigzag _profile forms tolerate a larger one).
- The attention functions take layout="BSND" only, which is all the original computes in; the
  sharding helpers take "BSND" and "BNSD", as there.
- zigzag_ring_attention_forward_flash_attn also computes causal=False, which the original refuses.
- gen_hamilton_circle(n) is spattn's decomposition for every n >= 2 but 4 and 6 (for which none
  exists); the original builds n = 8 and multiples of 4 from 8. The two-node scheme runs on
  n = m * u ranks in u nodes of m consecutive ranks, m = len(k) even with u >= 2, or m = 1; the
  original runs 16 = 2 x 8 (its 4-node copy 32 = 4 x 8), and gen_hamilton_circle_two_nodes takes
  m as ranks_per_node (default 8) beside n.
- The _profile forms' times (milliseconds) are spattn's profile of the plan's call: total_time its
  wall time, comp_total_time the time of its block kernels and merges, comm_total_time the time it
  waited for transfers (the original times its transfers on a stream of their own).
- Importing sets no environment variables (the original sets TNG_LOG_LEVEL, TORCH_LOGS and
  TORCHDYNAMO_VERBOSE).
- Not here: the original's communication classes (RingComm, A2AComm) and merge helper
  (update_out_and_lse), spattn's plans doing both, and hamilton_attention_forward_causal_flash_attn_debug,
  a stub whose body is `pass`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _core, profiling
from .communicator import communicator_for, raise_on_every_rank
from .functional import attention_function, hamilton2_attn_func, ring_flash_attn_func, zigzag_ring_flash_attn_func

Routes = List[List[int]]
ProfileTimes = Dict[str, float]

_LAYOUT_SEQUENCE_DIM = {"BSND": 1, "BNSD": 2}


# ---- Cycles and paths -------------------------------------------------------------------------


def _check_count(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}; expected an integer of at least {minimum}")


def _complete_graph_error(n: int) -> str:
    """Why the K_n functions cannot run on n ranks, or "": each rank holds n-1 chunks, one per
    cycle, and the cycles must exist."""
    if n < 2:
        return (f"K_{n} has no arcs, so no cycle to carry a chunk (each rank holds n-1 = {n - 1}); the K_n "
                "functions need at least 2 ranks (ring_attention_forward_flash_attn runs on any)")
    return _core.hamiltonian_decomposition_error(n)


def gen_hamilton_circle(n: int) -> Routes:
    """n-1 arc-disjoint directed Hamiltonian cycles of the complete graph K_n: every ordered pair
    of the n ranks is an arc of exactly one cycle. Each cycle lists the ranks in travel order; its
    last rank sends to its first. spattn's hamilton algorithm rotates along the same cycles."""
    _check_count("n", n, 1)
    error = _complete_graph_error(n)
    if error:
        raise ValueError(f"gen_hamilton_circle(n={n}): {error}")
    return _core.hamiltonian_decomposition(n)


def _two_level_error(context: str, ranks_per_node: int, nodes: int) -> Optional[ValueError]:
    """Why `context` (what was asked, for the message) has no two-level scheme of `nodes` nodes of
    `ranks_per_node` ranks, or None."""
    error = _core.two_level_error(ranks_per_node, nodes)
    return ValueError(f"{context}: {error}") if error else None


def gen_hamilton_path_local(n: int) -> Routes:
    """n directed Hamiltonian paths on the n ranks of a node that use every ordered pair once:
    path i is the zig-zag path i, i+1, i-1, i+2, i-2, ... (mod n), which ends at i + n/2. n even,
    or 1 (the zig-zag paths cover each pair once only then)."""
    _check_count("n", n, 1)
    error = _two_level_error(f"gen_hamilton_path_local(n={n})", n, 2)
    if error:
        raise error
    # Node 0's stretch of each two-level cycle is that node's path.
    return [cycle[:n] for cycle in _core.two_level_cycles(n, 2)]


def gen_hamilton_circle_two_nodes(n: int, ranks_per_node: int = 8) -> Routes:
    """The m cycles of the (m-K_m-m)^u decomposition of n = m * u ranks in u nodes of m =
    ranks_per_node consecutive ranks (node b holds ranks b*m .. b*m+m-1): cycle i runs path i of
    gen_hamilton_path_local(m) through node 0, then through node 1, ..., node u-1, and back to its
    start. Every step each rank sends m-1 chunks within its node and one to the next node.
    The default m = 8 gives the original's cycles for n = 16 and 32."""
    _check_count("n", n, 1)
    _check_count("ranks_per_node", ranks_per_node, 1)
    if n % ranks_per_node:
        raise ValueError(f"n={n} is not a multiple of ranks_per_node={ranks_per_node}")
    error = _two_level_error(f"gen_hamilton_circle_two_nodes(n={n}, ranks_per_node={ranks_per_node})",
                             ranks_per_node, n // ranks_per_node)
    if error:
        raise error
    return _core.two_level_cycles(ranks_per_node, n // ranks_per_node)


# ---- Mappings -----------------------------------------------------------------------------------


def _routes_error(name: str, routes: Any, ranks: int, count: Optional[int] = None) -> Optional[ValueError]:
    """What keeps `routes` from being a list of `count` (any, when None) orderings of range(ranks), or None."""
    if not isinstance(routes, (list, tuple)) or not routes or (count is not None and len(routes) != count):
        wanted = f"{count}" if count is not None else "one or more"
        got = f"{len(routes)} entries" if isinstance(routes, (list, tuple)) else f"a {type(routes).__name__}"
        return ValueError(f"{name} must be a list of {wanted} orderings of the ranks 0..{ranks - 1}; got {got}")
    for index, route in enumerate(routes):
        if not isinstance(route, (list, tuple)) or sorted(route) != list(range(ranks)):
            return ValueError(f"{name}[{index}] = {route!r} must list each of the ranks 0..{ranks - 1} exactly once")
    return None


def _looping_ranks(name: str, looping: Any) -> int:
    """The rank count of a list of cycles (the length of each), after checking that they all order
    the same ranks."""
    if not isinstance(looping, (list, tuple)) or not looping or not isinstance(looping[0], (list, tuple)):
        got = f"{len(looping)} entries" if isinstance(looping, (list, tuple)) else f"a {type(looping).__name__}"
        raise ValueError(f"{name} must be a non-empty list of cycles, each a list of ranks; got {got}")
    ranks = len(looping[0])
    error = _routes_error(name, looping, ranks)
    if error:
        raise error
    return ranks


def _arc_table(name: str, routes: Sequence[Sequence[int]], ranks: int, closed: bool) -> Routes:
    """table[a][b] = the index of the route in which rank b follows rank a (in a closed route the
    first rank follows the last), -1 where no route has the arc a -> b."""
    table = [[-1] * ranks for _ in range(ranks)]
    for index, route in enumerate(routes):
        arcs = list(zip(route, list(route[1:]) + ([route[0]] if closed else [])))
        for tail, head in arcs:
            if tail == head:
                continue  # a one-rank cycle keeps its chunk
            if table[tail][head] != -1:
                raise ValueError(f"{name}: the arc {tail} -> {head} is in both {table[tail][head]} and {index}; "
                                 "each ordered pair of ranks may be an arc of one only")
            table[tail][head] = index
    return table


def _transposed(table: Routes) -> Routes:
    return [list(column) for column in zip(*table)]


def calculate_out_mapping_circle(looping: Routes) -> Routes:
    """n x n: mapping[src][dst] = i when dst follows src in cycle i of `looping` (n-1 cycles of
    K_n), the chunk src sends to dst at every step; -1 where no cycle has the arc (the diagonal)."""
    ranks = _looping_ranks("looping", looping)
    if len(looping) != ranks - 1:
        raise ValueError(f"looping has {len(looping)} cycles of {ranks} ranks; the complete graph K_{ranks} takes "
                         f"{ranks - 1}")
    return _arc_table("looping", looping, ranks, closed=True)


def calculate_in_mapping_circle(looping: Routes) -> Routes:
    """n x n: mapping[dst][src] = i when src precedes dst in cycle i of `looping`, the chunk dst
    receives from src at every step; -1 where no cycle has the arc. The transpose of
    calculate_out_mapping_circle."""
    return _transposed(calculate_out_mapping_circle(looping))


def calculate_intra_node_out_mapping_two_nodes(path0: Routes) -> Routes:
    """m x m over a node's local ranks: mapping[local][next] = i when next follows local in path i
    of `path0` (gen_hamilton_path_local(m)), the chunk sent within the node; -1 where no path has
    the arc (a path's last rank sends its chunk to the next node instead)."""
    ranks = _looping_ranks("path0", path0)
    if len(path0) != ranks:
        raise ValueError(f"path0 has {len(path0)} paths of {ranks} ranks; a node of {ranks} ranks takes {ranks}")
    return _arc_table("path0", path0, ranks, closed=False)


def calculate_intra_node_in_mapping_two_nodes(path0: Routes) -> Routes:
    """m x m: mapping[local][previous] = i when previous precedes local in path i of `path0`, the
    chunk received within the node; -1 where no path has the arc (a path's first rank receives from
    the previous node). The transpose of calculate_intra_node_out_mapping_two_nodes."""
    return _transposed(calculate_intra_node_out_mapping_two_nodes(path0))


def calculate_inter_node_mapping(looping: Routes) -> Tuple[List[Tuple[int, int]], List[Tuple[int, int]]]:
    """(in_mapping, out_mapping) of the arcs between nodes of `looping`, the m cycles of
    gen_hamilton_circle_two_nodes(n, m) (nodes of m consecutive ranks): out_mapping[r] =
    (receiver, i) and in_mapping[r] = (sender, i) for the one arc of cycle i that leaves rank r for,
    or enters r from, another node."""
    ranks = _looping_ranks("looping", looping)
    ranks_per_node = len(looping)
    if ranks % ranks_per_node or ranks // ranks_per_node < 2:
        raise ValueError(f"looping has {ranks_per_node} cycles of {ranks} ranks; nodes of {ranks_per_node} ranks "
                         "(one cycle per rank of a node) must fill 2 or more nodes exactly")
    inward: List[Optional[Tuple[int, int]]] = [None] * ranks
    outward: List[Optional[Tuple[int, int]]] = [None] * ranks
    for index, cycle in enumerate(looping):
        for tail, head in zip(cycle, list(cycle[1:]) + [cycle[0]]):
            if tail // ranks_per_node == head // ranks_per_node:
                continue
            if outward[tail] is not None or inward[head] is not None:
                raise ValueError(f"looping: rank {tail if outward[tail] is not None else head} has two arcs to "
                                 "other nodes in one direction; a two-level decomposition has one each way")
            outward[tail], inward[head] = (head, index), (tail, index)
    missing = [rank for rank in range(ranks) if outward[rank] is None or inward[rank] is None]
    if missing:
        raise ValueError(f"looping: ranks {missing} lack an arc to or from another node; a two-level "
                         "decomposition (gen_hamilton_circle_two_nodes) gives every rank one each way")
    return inward, outward


def calculate_source_rank_per_iter(looping: Routes) -> List[List[List[bool]]]:
    """n x n x (n-1): result[rank][step][i] says whether the chunk that `rank` holds on cycle i at
    step `step` came from a rank <= `rank`; it came from the rank `step` hops back along the cycle.
    Under the causal (zigzag) layout such a chunk's front half is visible to all of rank's queries
    and its back half to none; a chunk from a higher rank is visible to rank's back half only."""
    ranks = _looping_ranks("looping", looping)
    return [[[cycle[(cycle.index(rank) - step) % ranks] <= rank for cycle in looping] for step in range(ranks)]
            for rank in range(ranks)]


def calculate_mask_index_circle(looping: Routes) -> Routes:
    """n x (cycles): result[rank][i] = where rank stands in cycle i (its index in looping[i])."""
    ranks = _looping_ranks("looping", looping)
    return [[cycle.index(rank) for cycle in looping] for rank in range(ranks)]


# ---- Sharding -----------------------------------------------------------------------------------


def _sequence_dim(layout: str) -> int:
    try:
        return _LAYOUT_SEQUENCE_DIM[layout]
    except KeyError:
        raise ValueError(f"layout={layout!r}; allowed: 'BSND' (batch, sequence, heads, head dim) or 'BNSD'") from None


def _chunks(name: str, full: torch.Tensor, count: int, dim: int) -> Tuple[torch.Tensor, ...]:
    """`full` cut into `count` equal chunks along `dim`."""
    if full.dim() <= dim or full.shape[dim] % count:
        raise ValueError(f"{name} has shape {tuple(full.shape)}; dimension {dim} must split into {count} equal "
                         "chunks")
    return full.chunk(count, dim=dim)


def _check_rank(rank: Any, ranks: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < ranks:
        raise ValueError(f"rank={rank!r}; allowed: 0..{ranks - 1}")


def _circle_chunk_indices(looping: Any, rank: int) -> Tuple[int, List[int]]:
    """(chunk count, indices of rank's chunks in order): the sequence is cut into n * m chunks,
    m = len(looping), and cycle i gives rank r chunk i * n + (r's position in cycle i)."""
    ranks = _looping_ranks("looping", looping)
    _check_rank(rank, ranks)
    return ranks * len(looping), [index * ranks + list(cycle).index(rank) for index, cycle in enumerate(looping)]


def _zigzag_chunk_indices(looping: Any, rank: int) -> Tuple[int, List[int], List[int]]:
    """(chunk count, front indices, back indices): the sequence is cut into 2n blocks of m =
    len(looping) chunks, and rank r holds block r and block 2n-1-r."""
    ranks = _looping_ranks("looping", looping)
    _check_rank(rank, ranks)
    per_block = len(looping)
    front = [rank * per_block + index for index in range(per_block)]
    back = [(2 * ranks - 1 - rank) * per_block + index for index in range(per_block)]
    return 2 * ranks * per_block, front, back


def get_circle_init_qkv_for_rank(looping: Routes, q_all: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor,
                                 rank: int, layout: str = "BSND") -> Tuple[torch.Tensor, List[torch.Tensor],
                                                                            List[torch.Tensor]]:
    """Rank's shard of the full q_all (B, S, H, D) and k_all, v_all (B, S, HK, D) (sequence in
    dimension 2 for "BNSD") for the non-causal functions: (q, k list, v list), the k and v entries
    being rank's chunks (one per cycle of `looping`) and q their concatenation. Detached copies."""
    dim = _sequence_dim(layout)
    count, indices = _circle_chunk_indices(looping, rank)
    q_chunks, k_chunks, v_chunks = (_chunks(name, full, count, dim)
                                    for name, full in (("q_all", q_all), ("k_all", k_all), ("v_all", v_all)))
    local_q = torch.cat([q_chunks[index] for index in indices], dim=dim).detach().clone()
    return (local_q, [k_chunks[index].detach().clone() for index in indices],
            [v_chunks[index].detach().clone() for index in indices])


def get_circle_local_out_lse_for_rank(looping: Routes, out: torch.Tensor, lse0: torch.Tensor, rank: int,
                                      layout: str = "BSND") -> Tuple[torch.Tensor, torch.Tensor]:
    """Rank's part, in the order of get_circle_init_qkv_for_rank's q, of a full out (B, S, H, D)
    and lse0 (B, H, S): (out (B, S_local, H, D), lse (B, H, S_local)). Detached copies."""
    dim = _sequence_dim(layout)
    count, indices = _circle_chunk_indices(looping, rank)
    out_chunks, lse_chunks = _chunks("out", out, count, dim), _chunks("lse0", lse0, count, 2)
    return (torch.cat([out_chunks[index] for index in indices], dim=dim).detach().clone(),
            torch.cat([lse_chunks[index] for index in indices], dim=2).detach().clone())


def get_circle_init_qkv_for_rank_causal(looping: Routes, q_all: torch.Tensor, k_all: torch.Tensor,
                                        v_all: torch.Tensor, rank: int, layout: str = "BSND"
                                        ) -> Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor]]:
    """Rank's shard for the causal function: q is blocks r and 2n-1-r of 2n (the zigzag shard),
    each of m = len(looping) chunks, and k, v entry j is chunk j of block r followed by chunk j of
    block 2n-1-r. Detached copies."""
    dim = _sequence_dim(layout)
    count, front, back = _zigzag_chunk_indices(looping, rank)
    q_chunks, k_chunks, v_chunks = (_chunks(name, full, count, dim)
                                    for name, full in (("q_all", q_all), ("k_all", k_all), ("v_all", v_all)))

    def paired(chunks: Tuple[torch.Tensor, ...]) -> List[torch.Tensor]:
        return [torch.cat([chunks[first], chunks[second]], dim=dim).detach().clone()
                for first, second in zip(front, back)]

    local_q = torch.cat([q_chunks[index] for index in front + back], dim=dim).detach().clone()
    return local_q, paired(k_chunks), paired(v_chunks)


def get_circle_local_out_lse_for_rank_causal(looping: Routes, out: torch.Tensor, lse0: torch.Tensor, rank: int,
                                             layout: str = "BSND") -> Tuple[torch.Tensor, torch.Tensor]:
    """Rank's part, in the order of get_circle_init_qkv_for_rank_causal's q (the zigzag shard), of
    a full out (B, S, H, D) and lse0 (B, H, S). Detached copies."""
    dim = _sequence_dim(layout)
    count, front, back = _zigzag_chunk_indices(looping, rank)
    out_chunks, lse_chunks = _chunks("out", out, count, dim), _chunks("lse0", lse0, count, 2)
    return (torch.cat([out_chunks[index] for index in front + back], dim=dim).detach().clone(),
            torch.cat([lse_chunks[index] for index in front + back], dim=2).detach().clone())


def get_circle_init_qkv_for_rank_dummy(looping: Routes, batch_size: int, seqlen: int, nheads: int, d: int,
                                       device: Any, dtype: torch.dtype, layout: str = "BSND"
                                       ) -> Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor]]:
    """Random inputs of one rank's shape for timing: q (B, S/n, H, D) and k, v lists of m =
    len(looping) chunks of (B, S/(n m), H, D) (sequence in dimension 2 for "BNSD")."""
    dim = _sequence_dim(layout)
    ranks = _looping_ranks("looping", looping)
    if seqlen % (ranks * len(looping)):
        raise ValueError(f"seqlen={seqlen} must split into {ranks} x {len(looping)} equal chunks")
    shape = [batch_size, nheads, d]
    shape.insert(dim, seqlen // ranks)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    return q, list(k.chunk(len(looping), dim=dim)), list(v.chunk(len(looping), dim=dim))


def extract_local_for_ring(x_all: torch.Tensor, rank: int, world_size: int, dim: int = 1) -> torch.Tensor:
    """The rank-th of world_size equal stretches of x_all along `dim` (ring's layout). A detached copy."""
    _check_rank(rank, world_size)
    return _chunks("x_all", x_all, world_size, dim)[rank].detach().clone()


def extract_local_for_zigzag_ring(x_all: torch.Tensor, rank: int, world_size: int, dim: int = 1) -> torch.Tensor:
    """Chunks rank and 2 world_size - 1 - rank of 2 world_size along `dim` (zigzag's layout)."""
    _check_rank(rank, world_size)
    chunks = _chunks("x_all", x_all, 2 * world_size, dim)
    return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim=dim).contiguous()


def extract_local_for_ring_dummy(world_size: int, batch_size: int, seqlen: int, nheads: int, d: int, device: Any,
                                 dtype: torch.dtype, dim: int = 1) -> torch.Tensor:
    """A random shard for timing: (B, S/world_size, H, D), the sequence in dimension `dim`."""
    if seqlen % world_size:
        raise ValueError(f"seqlen={seqlen} must split into world_size={world_size} equal stretches")
    shape = [batch_size, nheads, d]
    shape.insert(dim, seqlen // world_size)
    return torch.randn(shape, device=device, dtype=dtype)


# ---- Attention ----------------------------------------------------------------------------------


def _communicator(q: Any, process_group: Any) -> Any:
    return communicator_for(q.device if isinstance(q, torch.Tensor) else torch.device("cpu"), process_group)


def _world_size_error(world_size: Any, ranks: int) -> Optional[Exception]:
    if world_size != ranks:
        return ValueError(f"world_size={world_size!r} but the process group has {ranks} ranks; pass "
                          f"world_size={ranks}")
    return None


def _shape_error(name: str, value: Any, shape: Sequence[int], meaning: str) -> Optional[Exception]:
    """What keeps `value` from being a nested list of `shape` (e.g. n x n), or None."""
    def first_mismatch(entry: Any, where: str, depth: int) -> Optional[str]:
        if depth == len(shape):
            return None
        if not isinstance(entry, (list, tuple)):
            return f"{where} is {entry!r}, not a list"
        if len(entry) != shape[depth]:
            return f"{where} has {len(entry)} entries"
        for index, inner in enumerate(entry):
            mismatch = first_mismatch(inner, f"{where}[{index}]", depth + 1)
            if mismatch:
                return mismatch
        return None

    mismatch = first_mismatch(value, name, 0)
    if mismatch:
        return ValueError(f"{name} must be a {' x '.join(map(str, shape))} nested list ({meaning}); {mismatch}")
    return None


def _given_shape_error(shapes: Dict[str, Tuple[Any, Sequence[int], str]]) -> Optional[Exception]:
    """The first error of _shape_error among the arguments given (not None): name -> (value, shape,
    what its dimensions are)."""
    for name, (value, shape, meaning) in shapes.items():
        error = None if value is None else _shape_error(name, value, shape, meaning)
        if error:
            return error
    return None


def _shard_error(q: Any, k: Any, v: Any, chunks: int, causal: bool) -> Optional[Exception]:
    """What is wrong with q (B, S_local, H, D) and the k, v lists of `chunks` entries of
    (B, S_chunk, HK, D) each (S_chunk even when causal: a front and a back half), or None."""
    def described(value: Any) -> str:
        return f"{tuple(value.shape)} on {value.device}" if isinstance(value, torch.Tensor) else type(value).__name__

    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        return ValueError(f"q is {described(q)}; expected a (B, S_local, H, D) tensor")
    for name, entries in (("k", k), ("v", v)):
        if not isinstance(entries, (list, tuple)) or len(entries) != chunks:
            got = f"{len(entries)} entries" if isinstance(entries, (list, tuple)) else f"a {type(entries).__name__}"
            return ValueError(f"{name} must be a list of {chunks} tensors, one per cycle; got {got}")
    first = k[0]
    if not isinstance(first, torch.Tensor) or first.dim() != 4 or first.shape[0] != q.shape[0] or \
            first.shape[3] != q.shape[3] or chunks * first.shape[1] != q.shape[1]:
        return ValueError(f"k[0] is {described(first)} and q {tuple(q.shape)}; with {chunks} entries each must be "
                          f"(B, S_local / {chunks}, HK, D) of q's B and D")
    for name, entries in (("k", k), ("v", v)):
        for index, entry in enumerate(entries):
            if not isinstance(entry, torch.Tensor) or entry.shape != first.shape or entry.device != q.device:
                return ValueError(f"{name}[{index}] is {described(entry)}; every k and v entry must have k[0]'s "
                                  f"shape {tuple(first.shape)} on q's device {q.device}")
    if causal and first.shape[1] % 2:
        return ValueError(f"k and v entries have {first.shape[1]} tokens; the causal layout's entries are a front "
                          "and a back chunk of equal length, so an even count")
    return None


def _common_error(dropout_p: Any, layout: Any) -> Optional[Exception]:
    if dropout_p != 0:
        return ValueError(f"dropout_p={dropout_p!r} is not supported: spattn computes exact attention without "
                          "dropout; allowed: 0")
    if layout != "BSND":
        return ValueError(f"layout={layout!r} is not supported by the attention functions; allowed: 'BSND' "
                          "(q and every k, v entry (batch, sequence, heads, head dim)), the layout the original "
                          "computes in")
    return None


def _first_error(*checks: Callable[[], Optional[Exception]]) -> Optional[Exception]:
    for check in checks:
        error = check()
        if error is not None:
            return error
    return None


def _lse_per_token(lse: torch.Tensor) -> torch.Tensor:
    """spattn's lse (B, H, S_local) as the original's Hamilton functions return theirs (the layout
    of their accumulator): (B, S_local, H, 1)."""
    return lse.transpose(1, 2).unsqueeze(-1)


def _profiled(call: Callable[[], Tuple[torch.Tensor, torch.Tensor]]) -> Tuple[torch.Tensor, torch.Tensor,
                                                                             ProfileTimes]:
    """call()'s (out, lse) and the original's timing dict (milliseconds) from spattn's profile of
    the one plan call (forward pass) inside it."""
    with profiling.profile() as calls:
        out, lse = call()
    (forward,) = calls
    return out, lse, {"total_time": forward.total_ms, "comm_total_time": forward.comm_wait_ms,
                      "comp_total_time": forward.compute_ms}


def ring_attention_forward_flash_attn(process_group, q, k, v, softmax_scale, dropout_p=0, causal=False,
                                      window_size=(-1, -1), alibi_slopes=None, deterministic=False):
    """Ring attention on this rank's stretch (extract_local_for_ring): q (B, S_local, H, D), k, v
    (B, S_local, HK, D) -> (out (B, S_local, H, D) in q's dtype, lse (B, H, S_local) fp32)."""
    out, lse, _ = ring_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                       deterministic, True, process_group)
    return out, lse


def zigzag_ring_attention_forward_flash_attn(process_group, q, k, v, softmax_scale, dropout_p=0, causal=True,
                                             window_size=(-1, -1), alibi_slopes=None, deterministic=False):
    """Zigzag ring attention on this rank's chunks r and 2N-1-r (extract_local_for_zigzag_ring);
    shapes and results as ring_attention_forward_flash_attn."""
    out, lse, _ = zigzag_ring_flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                              deterministic, True, process_group)
    return out, lse


def _checked_world_size(process_group: Any, q: Any, world_size: Any) -> None:
    communicator = _communicator(q, process_group)
    raise_on_every_rank(_world_size_error(world_size, communicator.size), communicator)


def ring_attention_forward_flash_attn_profile(process_group, q, k, v, softmax_scale, dropout_p=0, world_size=8,
                                              causal=False, window_size=(-1, -1), alibi_slopes=None,
                                              deterministic=False):
    """ring_attention_forward_flash_attn with world_size after dropout_p, as the original orders
    them; returns (out, lse, {'total_time', 'comm_total_time', 'comp_total_time'} in ms)."""
    _checked_world_size(process_group, q, world_size)
    return _profiled(lambda: ring_attention_forward_flash_attn(process_group, q, k, v, softmax_scale, dropout_p,
                                                               causal, window_size, alibi_slopes, deterministic))


def zigzag_ring_attention_forward_flash_attn_profile(process_group, q, k, v, softmax_scale, dropout_p=0,
                                                     world_size=8, causal=True, window_size=(-1, -1),
                                                     alibi_slopes=None, deterministic=False):
    """zigzag_ring_attention_forward_flash_attn with world_size after dropout_p; returns
    (out, lse, times in ms) as ring_attention_forward_flash_attn_profile."""
    _checked_world_size(process_group, q, world_size)
    return _profiled(lambda: zigzag_ring_attention_forward_flash_attn(process_group, q, k, v, softmax_scale,
                                                                      dropout_p, causal, window_size, alibi_slopes,
                                                                      deterministic))


def _rotation_algorithm(ranks: int, fallback: str) -> str:
    """spattn's hamilton where the rank count has a Hamiltonian decomposition, else `fallback`."""
    return "hamilton" if not _core.hamiltonian_decomposition_error(ranks) else fallback


def _complete_graph_call(process_group, q, k, v, softmax_scale0, dropout_p, world_size, layout, causal, looping,
                         out_mapping, in_mapping, source_rank_per_iter=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The K_n functions' checks (on every rank, before any transfer) and call."""
    communicator = _communicator(q, process_group)
    ranks = communicator.size
    chunks = ranks - 1
    error = _first_error(
        lambda: _world_size_error(world_size, ranks),
        lambda: ValueError(_complete_graph_error(ranks)) if ranks < 2 else None,
        lambda: _common_error(dropout_p, layout),
        lambda: _shard_error(q, k, v, chunks, causal),
        lambda: None if looping is None else _routes_error("looping", looping, ranks, count=chunks),
        lambda: _given_shape_error({
            "out_mapping": (out_mapping, (ranks, ranks), "world_size x world_size"),
            "in_mapping": (in_mapping, (ranks, ranks), "world_size x world_size"),
            "source_rank_per_iter": (source_rank_per_iter, (ranks, ranks, chunks), "rank x step x cycle"),
        }))
    raise_on_every_rank(error, communicator)
    if causal:
        # Entry j = (front chunk j, back chunk j): the fronts, then the backs, are the zigzag shard.
        half = k[0].shape[1] // 2
        keys, values = (torch.cat([entry[:, :half] for entry in entries] + [entry[:, half:] for entry in entries],
                                  dim=1) for entries in (k, v))
        algorithm = _rotation_algorithm(ranks, "zigzag")
    else:
        keys, values = torch.cat(list(k), dim=1), torch.cat(list(v), dim=1)
        algorithm = _rotation_algorithm(ranks, "ring")
    out, lse, _ = attention_function(algorithm)(q, keys, values, softmax_scale=softmax_scale0, causal=causal,
                                                return_attn_probs=True, group=process_group)
    return out, _lse_per_token(lse)


def hamilton_attention_forward_full_flash_attn(process_group, q, k, v, softmax_scale0, dropout_p=0, world_size=8,
                                               looping=None, out_mapping=None, in_mapping=None, layout="BSND"):
    """Non-causal attention on the K_n layout (get_circle_init_qkv_for_rank): q (B, S_local, H, D),
    k and v lists of world_size - 1 chunks (B, S_local / (world_size - 1), HK, D) ->
    (out (B, S_local, H, D) in q's dtype, lse (B, S_local, H, 1) fp32)."""
    return _complete_graph_call(process_group, q, k, v, softmax_scale0, dropout_p, world_size, layout, False, looping,
                                out_mapping, in_mapping)


def hamilton_attention_forward_causal_flash_attn(process_group, q, k, v, softmax_scale0, dropout_p=0, world_size=8,
                                                 looping=None, out_mapping=None, in_mapping=None,
                                                 source_rank_per_iter=None, layout="BSND"):
    """Causal attention on the zigzag K_n layout (get_circle_init_qkv_for_rank_causal): shapes
    and results as hamilton_attention_forward_full_flash_attn, each k, v entry a front and a back
    chunk."""
    return _complete_graph_call(process_group, q, k, v, softmax_scale0, dropout_p, world_size, layout, True, looping,
                                out_mapping, in_mapping, source_rank_per_iter)


def hamilton_attention_forward_full_flash_attn_two_nodes(process_group, q, k, v, softmax_scale0, dropout_p=0,
                                                         inter_in_mapping=None, inter_out_mapping=None,
                                                         out_mapping=None, in_mapping=None, layout="BSND"):
    """Non-causal attention on the two-level layout (get_circle_init_qkv_for_rank of
    gen_hamilton_circle_two_nodes(n, m)): q (B, S_local, H, D), k and v lists of m chunks, m the
    ranks per node -> (out, lse (B, S_local, H, 1) fp32) as the K_n function."""
    communicator = _communicator(q, process_group)
    ranks = communicator.size
    ranks_per_node = len(k) if isinstance(k, (list, tuple)) and k else 0
    nodes = ranks // ranks_per_node if ranks_per_node else 0

    def node_error() -> Optional[Exception]:
        if not ranks_per_node or ranks % ranks_per_node:
            return ValueError(f"k has {len(k) if isinstance(k, (list, tuple)) else repr(k)} entries; the two-node "
                              f"layout gives each rank one chunk per rank of its node, so a divisor of the "
                              f"{ranks} ranks")
        return _two_level_error(f"{nodes} node(s) of len(k) = {ranks_per_node} rank(s)", ranks_per_node, nodes)

    error = _first_error(
        node_error,
        lambda: _common_error(dropout_p, layout),
        lambda: _shard_error(q, k, v, ranks_per_node, False),
        lambda: _given_shape_error({
            "inter_in_mapping": (inter_in_mapping, (ranks, 2), "(sender, chunk) per rank"),
            "inter_out_mapping": (inter_out_mapping, (ranks, 2), "(receiver, chunk) per rank"),
            "out_mapping": (out_mapping, (ranks_per_node, ranks_per_node), "local rank x local rank"),
            "in_mapping": (in_mapping, (ranks_per_node, ranks_per_node), "local rank x local rank"),
        }))
    raise_on_every_rank(error, communicator)
    out, lse, _ = hamilton2_attn_func(q, torch.cat(list(k), dim=1), torch.cat(list(v), dim=1),
                                      softmax_scale=softmax_scale0, return_attn_probs=True, group=process_group,
                                      nodes=nodes)
    return out, _lse_per_token(lse)


def hamilton_attention_forward_full_flash_attn_profile(process_group, q, k, v, softmax_scale0, dropout_p=0,
                                                       world_size=8, looping=None, out_mapping=None,
                                                       in_mapping=None, layout="BSND"):
    """hamilton_attention_forward_full_flash_attn and its times: (out, lse, {'total_time',
    'comm_total_time', 'comp_total_time'} in ms)."""
    return _profiled(lambda: hamilton_attention_forward_full_flash_attn(
        process_group, q, k, v, softmax_scale0, dropout_p, world_size, looping, out_mapping, in_mapping, layout))


def hamilton_attention_forward_causal_flash_attn_profile(process_group, q, k, v, softmax_scale0, dropout_p=0,
                                                         world_size=8, looping=None, out_mapping=None,
                                                         in_mapping=None, source_rank_per_iter=None,
                                                         layout="BSND"):
    """hamilton_attention_forward_causal_flash_attn and its times (ms)."""
    return _profiled(lambda: hamilton_attention_forward_causal_flash_attn(
        process_group, q, k, v, softmax_scale0, dropout_p, world_size, looping, out_mapping, in_mapping,
        source_rank_per_iter, layout))


def hamilton_attention_forward_full_flash_attn_two_nodes_profile(process_group, q, k, v, softmax_scale0,
                                                                 dropout_p=0, inter_in_mapping=None,
                                                                 inter_out_mapping=None, out_mapping=None,
                                                                 in_mapping=None, layout="BSND"):
    """hamilton_attention_forward_full_flash_attn_two_nodes and its times (ms)."""
    return _profiled(lambda: hamilton_attention_forward_full_flash_attn_two_nodes(
        process_group, q, k, v, softmax_scale0, dropout_p, inter_in_mapping, inter_out_mapping, out_mapping,
        in_mapping, layout))


__all__ = [
    "calculate_in_mapping_circle",
    "calculate_inter_node_mapping",
    "calculate_intra_node_in_mapping_two_nodes",
    "calculate_intra_node_out_mapping_two_nodes",
    "calculate_mask_index_circle",
    "calculate_out_mapping_circle",
    "calculate_source_rank_per_iter",
    "extract_local_for_ring",
    "extract_local_for_ring_dummy",
    "extract_local_for_zigzag_ring",
    "gen_hamilton_circle",
    "gen_hamilton_circle_two_nodes",
    "gen_hamilton_path_local",
    "get_circle_init_qkv_for_rank",
    "get_circle_init_qkv_for_rank_causal",
    "get_circle_init_qkv_for_rank_dummy",
    "get_circle_local_out_lse_for_rank",
    "get_circle_local_out_lse_for_rank_causal",
    "hamilton_attention_forward_causal_flash_attn",
    "hamilton_attention_forward_causal_flash_attn_profile",
    "hamilton_attention_forward_full_flash_attn",
    "hamilton_attention_forward_full_flash_attn_profile",
    "hamilton_attention_forward_full_flash_attn_two_nodes",
    "hamilton_attention_forward_full_flash_attn_two_nodes_profile",
    "ring_attention_forward_flash_attn",
    "ring_attention_forward_flash_attn_profile",
    "zigzag_ring_attention_forward_flash_attn",
    "zigzag_ring_attention_forward_flash_attn_profile",
]
