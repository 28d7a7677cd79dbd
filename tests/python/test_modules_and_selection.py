"""UlyssesAttention (the original work's module) and auto_select (the cost model's choice): the
module matches the fp64 reference like the functions do, its unsupported arguments fail clearly,
and the strategy auto_select picks runs and matches the reference at this rank count."""

import functools

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import Problem, accuracy_failures, distributed, fresh_seed, full_inputs, reference, single_rank

SEQ = 24  # splits for every strategy at 1, 2 and 3 ranks


def check_accuracy(func, algorithm: str, problem: Problem, **degrees) -> None:
    seed = fresh_seed()
    inputs = full_inputs(problem, seed)
    layout = spattn.sequence_layout(algorithm, problem.seq, problem.heads, problem.kv_heads, causal=problem.causal,
                                    **degrees)
    failures = accuracy_failures(distributed(func, "separate", layout, problem, inputs), single_rank(problem, inputs),
                                 reference(problem, inputs))
    assert not failures, f"{algorithm} {problem} at {dist.get_world_size()} ranks, seed {seed}: {failures}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ulysses_module_matches_reference(causal):
    heads = 2 * dist.get_world_size()  # Ulysses splits the query heads over the ranks
    module = spattn.UlyssesAttention(dist.group.WORLD, scatter_idx=2, gather_idx=1, use_sync=True, attn_type="fa")
    problem = Problem(batch=2, seq=SEQ, heads=heads, kv_heads=2, head_dim=16, dtype=torch.float32, causal=causal)
    check_accuracy(module, "ulysses", problem)


def test_ulysses_module_refuses_other_layouts_and_softcap():
    with pytest.raises(ValueError, match="allowed: scatter_idx=2, gather_idx=1"):
        spattn.UlyssesAttention(None, scatter_idx=1, gather_idx=2)
    module = spattn.UlyssesAttention()
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match="softcap=30.0 is not supported"):
        module(q, q, q, softcap=30.0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_auto_selected_strategy_runs_and_matches_reference(causal):
    world_size = dist.get_world_size()
    problem = Problem(batch=1, seq=SEQ, heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, causal=causal)
    choice = spattn.auto_select(SEQ, 4, 2, 16, causal=causal, dtype=torch.float32)
    if world_size == 1:
        assert choice.algorithm == "ring"
    else:
        estimates = spattn.estimate_strategies(SEQ, 4, 2, 16, causal=causal, dtype=torch.float32)
        runnable = [e for e in estimates if not e.not_applicable]
        assert choice.algorithm == runnable[0].algorithm
        assert choice.configuration == runnable[0].configuration
    check_accuracy(choice, choice.algorithm, problem, **choice.degrees)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_hamilton2_and_usp_degrees_match_reference(causal):
    # hamilton2 over N nodes of one rank each (m = 1); usp with Ulysses degree 1 (a plain ring
    # across N groups) and with the ring across groups instead of zigzag.
    world_size = dist.get_world_size()
    problem = Problem(batch=1, seq=SEQ, heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, causal=causal)
    check_accuracy(functools.partial(spattn.hamilton2_attn_func, nodes=world_size), "hamilton2", problem,
                   nodes=world_size)
    check_accuracy(functools.partial(spattn.usp_attn_func, inner=1, across="ring"), "usp", problem, inner=1,
                   across="ring")


def test_auto_select_with_nodes_may_pick_hamilton2_and_binds_them():
    estimates = spattn.estimate_strategies(65536, 32, 8, 128, world_size=16, nodes=2, causal=True)
    hamilton2 = next(e for e in estimates if e.algorithm == "hamilton2")
    assert not hamilton2.not_applicable and "u = 2 nodes" in hamilton2.configuration
    # The default: 16 ranks fill 2 nodes of 8, the same model.
    assert spattn.estimate_strategies(65536, 32, 8, 128, world_size=16, causal=True) == estimates
    choice = spattn.auto_select(65536, 32, 8, 128, world_size=16, causal=True)
    assert choice.algorithm == estimates[0].algorithm
    if choice.algorithm == "hamilton2":
        assert choice.degrees == {"nodes": 2}
    with pytest.raises(spattn.SpattnError, match="nodes 3 must divide the 16 ranks"):
        spattn.estimate_strategies(65536, 32, 8, 128, world_size=16, nodes=3)


def test_auto_select_before_a_process_group_says_so(monkeypatch):
    monkeypatch.setattr(spattn.selection.dist, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="before torch.distributed has a process group.*world_size=N"):
        spattn.auto_select(4096, 8, 8, 64)
    with pytest.raises(RuntimeError, match="estimate_strategies was called before"):
        spattn.estimate_strategies(4096, 8, 8, 64)
    assert spattn.auto_select(4096, 8, 8, 64, world_size=1).algorithm == "ring"  # told, it needs no group


def test_estimates_put_the_runnable_fastest_first():
    estimates = spattn.estimate_strategies(65536, 32, 8, 128, world_size=8, causal=True)
    assert sorted(e.algorithm for e in estimates) == sorted(spattn.algorithms())
    runnable = [e for e in estimates if not e.not_applicable]
    assert runnable and estimates[:len(runnable)] == runnable
    times = [e.forward_backward_seconds for e in runnable]
    assert times == sorted(times) and all(t > 0 for t in times)
    # 6 ranks have no Hamiltonian decomposition: the estimate says why instead of a time.
    six = {e.algorithm: e for e in spattn.estimate_strategies(65536, 32, 8, 128, world_size=6, causal=True)}
    assert "4 or 6" in six["hamilton"].not_applicable or "6" in six["hamilton"].not_applicable


def test_a_sliding_window_shrinks_the_modelled_attention():
    # A window of 4096 keys in 65536: Ulysses computes 1/16 of the causal work and comes first,
    # while the rotations still send K,V at every step.
    plain = {e.algorithm: e for e in spattn.estimate_strategies(65536, 32, 8, 128, world_size=8, causal=True)}
    windowed = spattn.estimate_strategies(65536, 32, 8, 128, world_size=8, causal=True, window_size=(4096, 0))
    assert windowed[0].algorithm in ("ulysses", "usp")
    for estimate in windowed:
        if not estimate.not_applicable:
            assert 0 < estimate.forward_backward_seconds < plain[estimate.algorithm].forward_backward_seconds
    assert spattn.auto_select(65536, 32, 8, 128, world_size=8, causal=True, window_size=(4096, 0)).algorithm in (
        "ulysses", "usp")
    with pytest.raises(ValueError, match=r"window_size=\(-3, 0\): window \(-3, 0\) is not allowed; each side is >= 0, or -1"):
        spattn.estimate_strategies(65536, 32, 8, 128, world_size=8, window_size=(-3, 0))


def test_auto_select_avoids_strategies_that_cannot_run():
    # 3 query heads do not split over 2 ranks, so neither Ulysses nor USP may be chosen.
    assert spattn.auto_select(4096, 3, 3, 64, world_size=2, causal=False).algorithm not in ("ulysses", "usp")
    with pytest.raises(ValueError, match="allowed: nvswitch"):
        spattn.auto_select(4096, 8, 8, 64, world_size=2, cluster="dragonfly")
    with pytest.raises(ValueError, match="no strategy runs seq_len 7"):
        spattn.auto_select(7, 8, 8, 64, world_size=2)
    with pytest.raises(ValueError, match="allowed: ring, zigzag"):
        spattn.attention_function("hamilton2")
