"""Hamilton Attention / TASP's names (spattn.hamilton_attention): each attention function called as
the original's test script calls it, on shards that the module's own helpers cut from fresh random
inputs, against the fp64 reference (out, lse and, since spattn's backward runs under them, dq, dk,
dv); the _profile forms; the cycle and mapping helpers against their definitions; refusals by name."""

from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import _core
from spattn import hamilton_attention as tasp
from attention_checks import Problem, accuracy_failures, fresh_seed, full_inputs, raises_on_every_rank, reference, \
    single_rank

# Splits into every layout here at 1, 2 and 3 ranks: ring's N stretches, zigzag's 2N chunks,
# the K_n layouts' n(n-1) and 2n(n-1) chunks and the two-node layout's n*m.
SEQ = 24
POSITIONS = torch.arange(SEQ).view(1, SEQ, 1, 1)  # cut by a helper: the global positions of a shard's tokens


class Setup(NamedTuple):
    """How the original's test calls one function at this rank count."""
    cut: Callable[..., Tuple[Any, Any, Any]]  # (q_all, k_all, v_all, rank) -> this rank's q, k, v arguments
    keywords: Dict[str, Any]  # what it passes beside (process_group, q, k, v, softmax_scale)
    lse_per_token: bool  # lse (B, S_local, H, 1), as the Hamilton functions return it; else (B, H, S_local)


def complete_graph_cycles(world_size: int) -> List[List[int]]:
    try:
        return tasp.gen_hamilton_circle(world_size)
    except ValueError as error:
        pytest.skip(f"the K_n layout does not exist at {world_size} rank(s) ({error}); 2 and 3 ranks run it")


def largest_node(world_size: int) -> int:
    """The most ranks per node that the two-node scheme takes at this rank count (1 below 4 ranks)."""
    return max(m for m in range(1, world_size + 1)
               if world_size % m == 0 and not _core.two_level_error(m, world_size // m))


def setup_of(name: str, causal: bool, world_size: int) -> Setup:
    if name == "ring_attention_forward_flash_attn":
        return Setup(lambda q, k, v, rank: tuple(tasp.extract_local_for_ring(x, rank, world_size) for x in (q, k, v)),
                     {"causal": causal}, lse_per_token=False)
    if name == "zigzag_ring_attention_forward_flash_attn":
        return Setup(lambda q, k, v, rank: tuple(tasp.extract_local_for_zigzag_ring(x, rank, world_size)
                                                 for x in (q, k, v)),
                     {"causal": causal}, lse_per_token=False)
    if name == "hamilton_attention_forward_full_flash_attn_two_nodes":
        ranks_per_node = largest_node(world_size)
        looping = tasp.gen_hamilton_circle_two_nodes(world_size, ranks_per_node=ranks_per_node)
        local_paths = tasp.gen_hamilton_path_local(ranks_per_node)
        keywords = {"out_mapping": tasp.calculate_intra_node_out_mapping_two_nodes(local_paths),
                    "in_mapping": tasp.calculate_intra_node_in_mapping_two_nodes(local_paths)}
        if world_size > ranks_per_node:  # arcs between nodes exist
            keywords["inter_in_mapping"], keywords["inter_out_mapping"] = tasp.calculate_inter_node_mapping(looping)
        return Setup(lambda q, k, v, rank: tasp.get_circle_init_qkv_for_rank(looping, q, k, v, rank), keywords,
                     lse_per_token=True)
    looping = complete_graph_cycles(world_size)
    keywords = {"world_size": world_size, "looping": looping,
                "out_mapping": tasp.calculate_out_mapping_circle(looping),
                "in_mapping": tasp.calculate_in_mapping_circle(looping)}
    if causal:
        keywords["source_rank_per_iter"] = tasp.calculate_source_rank_per_iter(looping)
        return Setup(lambda q, k, v, rank: tasp.get_circle_init_qkv_for_rank_causal(looping, q, k, v, rank),
                     keywords, lse_per_token=True)
    return Setup(lambda q, k, v, rank: tasp.get_circle_init_qkv_for_rank(looping, q, k, v, rank), keywords,
                 lse_per_token=True)


def as_list(x: Any) -> List[torch.Tensor]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def positions(setup: Setup, rank: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(query positions, key positions) of rank's shard, the keys in the order of its k list
    concatenated."""
    q, k, _ = setup.cut(POSITIONS, POSITIONS, POSITIONS, rank)
    return q.flatten(), torch.cat(as_list(k), dim=1).flatten()


def gather(local: torch.Tensor, positions_per_rank: List[torch.Tensor], dim: int) -> torch.Tensor:
    """The full fp64 tensor from every rank's shard, whose tokens (along `dim`) sit at these global
    positions; each position must come from exactly one rank."""
    local = local.detach().double().contiguous()
    shards = [torch.empty_like(local) for _ in positions_per_rank]
    dist.all_gather(shards, local)
    order = torch.cat(positions_per_rank)
    assert torch.equal(order.sort().values, torch.arange(SEQ)), f"the shards hold positions {order.tolist()}"
    return torch.cat(shards, dim=dim).index_select(dim, order.argsort())


FUNCTIONS = [("ring_attention_forward_flash_attn", False), ("ring_attention_forward_flash_attn", True),
             ("zigzag_ring_attention_forward_flash_attn", True), ("zigzag_ring_attention_forward_flash_attn", False),
             ("hamilton_attention_forward_full_flash_attn", False),
             ("hamilton_attention_forward_causal_flash_attn", True),
             ("hamilton_attention_forward_full_flash_attn_two_nodes", False)]
FUNCTION_IDS = [f"{name}-{'causal' if causal else 'full'}" for name, causal in FUNCTIONS]


def sharded_call(name: str, causal: bool, problem: Problem, inputs: Dict[str, torch.Tensor]):
    """Cuts this rank's arguments with the module's helpers and calls `name` as the original's test
    does; returns (setup, out, lse, the leaves q and every k, v entry)."""
    setup = setup_of(name, causal, dist.get_world_size())
    q, k, v = setup.cut(inputs["q"], inputs["k"], inputs["v"], dist.get_rank())
    for leaf in [q, *as_list(k), *as_list(v)]:
        leaf.requires_grad_()
    out, lse = getattr(tasp, name)(None, q, k, v, problem.softmax_scale, **setup.keywords)
    return setup, out, lse, (q, k, v)


def accuracy_failures_of(name: str, causal: bool, problem: Problem, seed: int) -> Dict[str, str]:
    """Runs `name` forward and backward on this rank's shard of fresh inputs, gathers out, lse, dq,
    dk, dv and returns the outputs that miss the project's criterion against the fp64 reference."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    inputs = full_inputs(problem, seed)
    setup, out, lse, (q, k, v) = sharded_call(name, causal, problem, inputs)
    local_seq = SEQ // world_size
    assert out.shape == q.shape and out.dtype == problem.dtype and lse.dtype == torch.float32
    if setup.lse_per_token:
        assert lse.shape == (problem.batch, local_seq, problem.heads, 1)
        lse = lse.squeeze(-1).transpose(1, 2)
    assert lse.shape == (problem.batch, problem.heads, local_seq)
    query_positions, _ = positions(setup, rank)
    out.backward(inputs["dout"].index_select(1, query_positions))  # gradients too, which the original lacks

    every_rank = [positions(setup, other) for other in range(world_size)]
    queries, keys = [entry[0] for entry in every_rank], [entry[1] for entry in every_rank]
    results = {"out": gather(out, queries, dim=1), "lse": gather(lse, queries, dim=2),
               "dq": gather(q.grad, queries, dim=1),
               "dk": gather(torch.cat([entry.grad for entry in as_list(k)], dim=1), keys, dim=1),
               "dv": gather(torch.cat([entry.grad for entry in as_list(v)], dim=1), keys, dim=1)}
    return accuracy_failures(results, single_rank(problem, inputs), reference(problem, inputs))


@pytest.mark.parametrize("dtype, softmax_scale", [(torch.float32, None), (torch.bfloat16, None), (torch.float32, 0.3)],
                         ids=["fp32", "bf16", "fp32-scale"])
@pytest.mark.parametrize("name, causal", FUNCTIONS, ids=FUNCTION_IDS)
def test_function_matches_reference(name, causal, dtype, softmax_scale):
    problem = Problem(batch=2, seq=SEQ, heads=4, kv_heads=2, head_dim=16, dtype=dtype, causal=causal,
                      softmax_scale=softmax_scale)
    seed = fresh_seed()
    failures = accuracy_failures_of(name, causal, problem, seed)
    assert not failures, f"{name} {problem} at {dist.get_world_size()} ranks, seed {seed}: {failures}"


@pytest.mark.parametrize("name, causal", [("hamilton_attention_forward_full_flash_attn", False),
                                          ("hamilton_attention_forward_causal_flash_attn", True)],
                         ids=["full", "causal"])
def test_k_n_functions_run_ring_or_zigzag_where_hamilton_does_not_apply(name, causal, monkeypatch):
    # K_4 and K_6 have no Hamiltonian decomposition, yet inputs cut by any n-1 orderings of the
    # ranks can reach these functions, which then run ring (zigzag when causal). Every rank count
    # of CI has a decomposition, so the fallback is forced here.
    monkeypatch.setattr(tasp, "_rotation_algorithm", lambda ranks, fallback: fallback)
    problem = Problem(batch=1, seq=SEQ, heads=4, kv_heads=2, head_dim=8, dtype=torch.float32, causal=causal)
    seed = fresh_seed()
    with spattn.profile() as calls:
        failures = accuracy_failures_of(name, causal, problem, seed)
    assert {call.algorithm for call in calls} == {"zigzag" if causal else "ring"}
    assert not failures, f"{name} {problem} at {dist.get_world_size()} ranks, seed {seed}: {failures}"


@pytest.mark.parametrize("name, causal", FUNCTIONS, ids=FUNCTION_IDS)
def test_profile_form_returns_the_same_results_and_times_in_ms(name, causal):
    problem = Problem(batch=1, seq=SEQ, heads=2, kv_heads=2, head_dim=8, dtype=torch.float32, causal=causal)
    inputs = full_inputs(problem, fresh_seed())
    setup, out, lse, (q, k, v) = sharded_call(name, causal, problem, inputs)
    profiled = getattr(tasp, name + "_profile")
    world_size = dist.get_world_size()
    if name.startswith(("ring", "zigzag")):
        # Positionally: world_size comes after dropout_p here, before causal.
        result = profiled(None, q, k, v, None, 0, world_size, causal)
    else:
        result = profiled(None, q, k, v, None, **setup.keywords)
    assert len(result) == 3
    profiled_out, profiled_lse, times = result
    assert torch.equal(profiled_out, out) and torch.equal(profiled_lse, lse)
    assert set(times) == {"total_time", "comm_total_time", "comp_total_time"}
    assert all(isinstance(value, float) and value >= 0 for value in times.values())
    assert times["total_time"] > 0 and times["comp_total_time"] <= times["total_time"] * 1.01 + 0.05


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
def test_sharding_helpers_cut_the_documented_chunks(n, causal):
    # Rank r's chunks: cycle i gives chunk i*n + (r's place in cycle i) of n(n-1) (non-causal);
    # blocks r and 2n-1-r of 2n, each of n-1 chunks, entry j = (chunk j of one, chunk j of the other)
    # (causal). The out/lse helpers take the same tokens, and every token goes to one rank.
    looping = tasp.gen_hamilton_circle(n)
    cut = tasp.get_circle_init_qkv_for_rank_causal if causal else tasp.get_circle_init_qkv_for_rank
    take_out_lse = tasp.get_circle_local_out_lse_for_rank_causal if causal else tasp.get_circle_local_out_lse_for_rank
    seq = 4 * n * (n - 1)
    full = torch.arange(seq).view(1, seq, 1, 1)
    lse = torch.arange(seq).view(1, 1, seq)  # (B, H, S)
    owned = []
    for rank in range(n):
        q, k, v = cut(looping, full, full, full, rank)
        assert len(k) == len(v) == n - 1 and all(torch.equal(a, b) for a, b in zip(k, v))
        if causal:
            block, size = seq // (2 * n), seq // (2 * n * (n - 1))
            zigzag = tasp.extract_local_for_zigzag_ring(full, rank, n)
            assert torch.equal(q, zigzag)
            expected = [torch.cat([zigzag[:, j * size:(j + 1) * size],
                                   zigzag[:, block + j * size:block + (j + 1) * size]], dim=1) for j in range(n - 1)]
        else:
            size = seq // (n * (n - 1))
            chunks = [i * n + looping[i].index(rank) for i in range(n - 1)]
            expected = [full[:, chunk * size:(chunk + 1) * size] for chunk in chunks]
            assert torch.equal(q, torch.cat(expected, dim=1))
        assert all(torch.equal(entry, wanted) for entry, wanted in zip(k, expected))
        out, local_lse = take_out_lse(looping, full, lse, rank)
        assert torch.equal(out, q) and torch.equal(local_lse.flatten(), q.flatten())
        owned.append(q.flatten())
    assert torch.equal(torch.cat(owned).sort().values, torch.arange(seq))


def test_layout_names_work_in_bnsd_too():
    looping = tasp.gen_hamilton_circle(3)
    full = torch.arange(12).view(1, 1, 12, 1)  # (B, H, S, D)
    q, k, _ = tasp.get_circle_init_qkv_for_rank(looping, full, full, full, 1, layout="BNSD")
    expected, _, _ = tasp.get_circle_init_qkv_for_rank(looping, full.transpose(1, 2), full.transpose(1, 2),
                                                       full.transpose(1, 2), 1)
    assert torch.equal(q, expected.transpose(1, 2)) and torch.equal(torch.cat(k, dim=2), q)
    q, k, v = tasp.get_circle_init_qkv_for_rank_dummy(looping, 2, 12, 4, 8, "cpu", torch.float32, layout="BNSD")
    assert q.shape == (2, 4, 4, 8) and len(k) == len(v) == 2 and k[0].shape == (2, 4, 2, 8)
    assert tasp.extract_local_for_ring_dummy(3, 2, 12, 4, 8, "cpu", torch.float32).shape == (2, 4, 4, 8)


def arcs_of(routes: List[List[int]], closed: bool) -> List[Tuple[int, int]]:
    return [(route[i], route[(i + 1) % len(route)]) for route in routes
            for i in range(len(route) if closed else len(route) - 1)]


@pytest.mark.parametrize("n", [2, 3, 5, 7, 8, 9, 10, 12, 14, 16])
def test_cycles_cover_every_arc_once_and_the_mappings_follow_them(n):
    looping = tasp.gen_hamilton_circle(n)
    assert len(looping) == n - 1 and all(sorted(cycle) == list(range(n)) for cycle in looping)
    arcs = arcs_of(looping, closed=True)
    assert sorted(arcs) == [(a, b) for a in range(n) for b in range(n) if a != b]  # each ordered pair once
    out_mapping, in_mapping = tasp.calculate_out_mapping_circle(looping), tasp.calculate_in_mapping_circle(looping)
    for source in range(n):
        for target in range(n):
            # out[src][dst]: the cycle in which dst follows src; in[dst][src]: the same cycle.
            cycles = [i for i, cycle in enumerate(looping) if (source, target) in arcs_of([cycle], closed=True)]
            assert out_mapping[source][target] == (cycles[0] if cycles else -1)
            assert in_mapping[target][source] == out_mapping[source][target]
    mask = tasp.calculate_mask_index_circle(looping)
    assert all(looping[i][mask[rank][i]] == rank for rank in range(n) for i in range(n - 1))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_source_rank_per_iter_follows_the_chunks_round_their_cycles(n):
    looping = tasp.gen_hamilton_circle(n)
    out_mapping = tasp.calculate_out_mapping_circle(looping)
    source_is_lower = tasp.calculate_source_rank_per_iter(looping)
    # held[rank][i]: whose chunk of cycle i rank holds; each step every rank sends along out_mapping.
    held = [[rank] * (n - 1) for rank in range(n)]
    for step in range(n):
        for rank in range(n):
            assert source_is_lower[rank][step] == [held[rank][i] <= rank for i in range(n - 1)]
        moved = [[-1] * (n - 1) for _ in range(n)]
        for sender in range(n):
            for receiver in range(n):
                if out_mapping[sender][receiver] >= 0:
                    moved[receiver][out_mapping[sender][receiver]] = held[sender][out_mapping[sender][receiver]]
        held = moved
    assert held == [[rank] * (n - 1) for rank in range(n)]  # n steps bring every chunk home


@pytest.mark.parametrize("n, ranks_per_node", [(16, 8), (32, 8), (8, 4), (4, 2), (6, 2), (12, 4), (3, 1)])
def test_two_node_cycles_and_mappings_follow_their_definitions(n, ranks_per_node):
    looping = tasp.gen_hamilton_circle_two_nodes(n, ranks_per_node=ranks_per_node)
    paths = tasp.gen_hamilton_path_local(ranks_per_node)
    m = ranks_per_node
    # The node paths use each ordered pair of a node's ranks once; path i is the zig-zag path from i.
    assert sorted(arcs_of(paths, closed=False)) == [(a, b) for a in range(m) for b in range(m) if a != b]
    assert paths == [[(i + (t + 1) // 2 if t % 2 else i - t // 2) % m for t in range(m)] for i in range(m)]
    # Cycle i is path i in node 0, node 1, ...; the cycles are arc-disjoint.
    assert looping == [[node * m + rank for node in range(n // m) for rank in path] for path in paths]
    arcs = arcs_of(looping, closed=True)
    assert len(set(arcs)) == len(arcs) == n * m
    out_mapping = tasp.calculate_intra_node_out_mapping_two_nodes(paths)
    in_mapping = tasp.calculate_intra_node_in_mapping_two_nodes(paths)
    for source in range(m):
        for target in range(m):
            routes = [i for i, path in enumerate(paths) if (source, target) in arcs_of([path], closed=False)]
            assert out_mapping[source][target] == (routes[0] if routes else -1)
            assert in_mapping[target][source] == out_mapping[source][target]
    inter_in, inter_out = tasp.calculate_inter_node_mapping(looping)
    for rank in range(n):
        receiver, cycle = inter_out[rank]
        assert receiver // m != rank // m and (rank, receiver) in arcs_of([looping[cycle]], closed=True)
        assert inter_in[receiver] == (rank, cycle)
    across = [(a, b) for a, b in arcs if a // m != b // m]
    assert len(across) == n  # one arc out of its node per rank


def test_two_node_helpers_reproduce_the_originals_examples():
    # The rows that docs/compat/hamilton-attention-api.md quotes from the original at 16 ranks.
    looping = tasp.gen_hamilton_circle_two_nodes(16)
    assert looping[0] == [0, 1, 7, 2, 6, 3, 5, 4, 8, 9, 15, 10, 14, 11, 13, 12]
    paths = tasp.gen_hamilton_path_local(8)
    assert tasp.calculate_intra_node_out_mapping_two_nodes(paths)[0] == [-1, 0, 5, 1, 6, 2, 7, 3]
    assert tasp.calculate_intra_node_in_mapping_two_nodes(paths)[0] == [-1, 4, 1, 5, 2, 6, 3, 7]
    inter_in, inter_out = tasp.calculate_inter_node_mapping(looping)
    assert (inter_in[0], inter_out[0]) == ((12, 0), (12, 4))


def test_generators_refuse_rank_counts_without_a_decomposition():
    for n in (4, 6):
        with pytest.raises(ValueError, match=rf"gen_hamilton_circle\(n={n}\): no decomposition .* on {n} ranks"):
            tasp.gen_hamilton_circle(n)
    with pytest.raises(ValueError, match=r"K_1 has no arcs"):
        tasp.gen_hamilton_circle(1)
    with pytest.raises(ValueError, match=r"gen_hamilton_path_local\(n=3\): .*even number of ranks per node"):
        tasp.gen_hamilton_path_local(3)
    with pytest.raises(ValueError, match=r"n=12 is not a multiple of ranks_per_node=8"):
        tasp.gen_hamilton_circle_two_nodes(12)
    with pytest.raises(ValueError, match=r"at least 2 nodes"):
        tasp.gen_hamilton_circle_two_nodes(8)
    with pytest.raises(ValueError, match=r"looping has 1 cycles of 3 ranks; the complete graph K_3 takes 2"):
        tasp.calculate_out_mapping_circle([[0, 1, 2]])
    with pytest.raises(ValueError, match=r"the arc 0 -> 1 is in both 0 and 1"):
        tasp.calculate_out_mapping_circle([[0, 1, 2], [0, 1, 2]])
    with pytest.raises(ValueError, match=r"looping\[1\] = \[0, 0, 2\] must list each of the ranks 0..2 exactly"):
        tasp.calculate_source_rank_per_iter([[0, 1, 2], [0, 0, 2]])
    with pytest.raises(ValueError, match=r"x_all has shape \(1, 5\); dimension 1 must split into 2 equal chunks"):
        tasp.extract_local_for_ring(torch.zeros(1, 5), 0, 2)


def small_circle_shard(causal=False):
    """This rank's K_n arguments of a small random problem, and the looping that cut them."""
    world_size = dist.get_world_size()
    looping = complete_graph_cycles(world_size)
    seq = 4 * world_size * (world_size - 1)
    q, k, v = (torch.randn(1, seq, 2, 8) for _ in range(3))
    cut = tasp.get_circle_init_qkv_for_rank_causal if causal else tasp.get_circle_init_qkv_for_rank
    return looping, cut(looping, q, k, v, dist.get_rank())


def test_k_n_functions_refuse_bad_arguments_by_name():
    world_size = dist.get_world_size()
    looping, (q, k, v) = small_circle_shard()
    full = tasp.hamilton_attention_forward_full_flash_attn
    with pytest.raises(ValueError, match=rf"world_size=8 but the process group has {world_size} ranks; pass "
                                         rf"world_size={world_size}"):
        full(None, q, k, v, None)
    with pytest.raises(ValueError, match=rf"k must be a list of {world_size - 1} tensors, one per cycle; got "
                                         rf"{world_size} entries"):
        full(None, q, k + k[:1], v, None, world_size=world_size)
    with pytest.raises(ValueError, match=r"v\[0\] is \(1, 3, 2, 8\) on cpu; every k and v entry must have k\[0\]'s"):
        full(None, q, k, [v[0][:, :3]] + v[1:], None, world_size=world_size)
    with pytest.raises(ValueError, match=r"dropout_p=0.1 is not supported.*allowed: 0"):
        full(None, q, k, v, None, 0.1, world_size)
    with pytest.raises(ValueError, match=r"layout='BNSD' is not supported by the attention functions"):
        full(None, q, k, v, None, world_size=world_size, layout="BNSD")
    with pytest.raises(ValueError, match=rf"looping must be a list of {world_size - 1} orderings"):
        full(None, q, k, v, None, world_size=world_size, looping=looping + looping)
    with pytest.raises(ValueError, match=rf"out_mapping must be a {world_size} x {world_size} nested list"):
        full(None, q, k, v, None, world_size=world_size, out_mapping=[[-1]])
    with pytest.raises(ValueError, match=r"source_rank_per_iter must be a .* nested list \(rank x step x cycle\)"):
        tasp.hamilton_attention_forward_causal_flash_attn(None, *small_circle_shard(causal=True)[1], None,
                                                          world_size=world_size, source_rank_per_iter=[[[True]]])
    odd = [entry[:, :1] for entry in k]
    with pytest.raises(ValueError, match=r"entries have 1 tokens; the causal layout's entries are a front and a back"):
        tasp.hamilton_attention_forward_causal_flash_attn(None, q[:, :world_size - 1], odd, odd, None,
                                                          world_size=world_size)


def test_k_n_functions_refuse_a_single_rank():
    if dist.get_world_size() != 1:
        pytest.skip("the refusal of K_1: at 1 rank only")
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"K_1 has no arcs.*need at least 2 ranks"):
        tasp.hamilton_attention_forward_full_flash_attn(None, q, [], [], None, world_size=1)


def test_two_node_function_refuses_a_node_size_that_does_not_fit():
    world_size = dist.get_world_size()
    q = torch.randn(1, world_size + 1, 2, 8)
    entries = list(q.split(1, dim=1))
    with pytest.raises(ValueError, match=rf"k has {world_size + 1} entries; the two-node layout gives each rank one "
                                         rf"chunk per rank of its node, so a divisor of the {world_size} ranks"):
        tasp.hamilton_attention_forward_full_flash_attn_two_nodes(None, q, entries, entries, None)


def test_an_argument_bad_on_one_rank_is_refused_on_every_rank():
    world_size, rank = dist.get_world_size(), dist.get_rank()
    q = torch.randn(1, 2, 2, 8)
    bad_rank = world_size - 1
    message = rf"world_size={world_size + 1} but the process group has {world_size} ranks"
    with raises_on_every_rank(bad_rank, message):
        tasp.ring_attention_forward_flash_attn_profile(None, q, q, q, None, 0,
                                                       world_size + (rank == bad_rank))
    # Nobody was left waiting: a good call still runs on every rank.
    out, _ = tasp.ring_attention_forward_flash_attn(None, q, q, q, None)
    assert out.shape == q.shape
