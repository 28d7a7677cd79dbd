"""Every wrapper's out, lse and gradients (through autograd) against an fp64 reference of the
gathered full sequence, by the project's criterion: distributed error <= 2 x the error of a
same-dtype single-rank run of the same inputs + a tiny floor. Fresh random inputs per test."""

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import Problem, accuracy_failures, distributed, fresh_seed, full_inputs, reference, single_rank

# wrapper name -> (function, its algorithm, how it takes its inputs)
WRAPPERS = {
    "ring_flash_attn_func": (spattn.ring_flash_attn_func, "ring", "separate"),
    "ring_flash_attn_kvpacked_func": (spattn.ring_flash_attn_kvpacked_func, "ring", "kv"),
    "ring_flash_attn_qkvpacked_func": (spattn.ring_flash_attn_qkvpacked_func, "ring", "qkv"),
    "zigzag_ring_flash_attn_func": (spattn.zigzag_ring_flash_attn_func, "zigzag", "separate"),
    "zigzag_ring_flash_attn_kvpacked_func": (spattn.zigzag_ring_flash_attn_kvpacked_func, "zigzag", "kv"),
    "zigzag_ring_flash_attn_qkvpacked_func": (spattn.zigzag_ring_flash_attn_qkvpacked_func, "zigzag", "qkv"),
    "stripe_flash_attn_func": (spattn.stripe_flash_attn_func, "stripe", "separate"),
    "stripe_flash_attn_kvpacked_func": (spattn.stripe_flash_attn_kvpacked_func, "stripe", "kv"),
    "stripe_flash_attn_qkvpacked_func": (spattn.stripe_flash_attn_qkvpacked_func, "stripe", "qkv"),
    "ulysses_attn_func": (spattn.ulysses_attn_func, "ulysses", "separate"),
    "hamilton_attn_func": (spattn.hamilton_attn_func, "hamilton", "separate"),
    "allgather_attn_func": (spattn.allgather_attn_func, "allgather", "separate"),
    "usp_attn_func": (spattn.usp_attn_func, "usp", "separate"),
}
SEPARATE = [name for name, (_, _, packing) in WRAPPERS.items() if packing == "separate"]
PACKED = [name for name, (_, _, packing) in WRAPPERS.items() if packing != "separate"]

# 24 tokens split at 1, 2 and 3 ranks for every strategy (hamilton: S % 2N(N-1), zigzag: S % 2N).
SEQ = 24


def head_counts(algorithm: str, packing: str):
    """GQA 4:2, except qkv-packed (one head count) and Ulysses at a rank count that 4 heads do not split into."""
    if packing == "qkv":
        return 2, 2
    world_size = dist.get_world_size()
    if algorithm == "ulysses" and 4 % world_size:
        return 2 * world_size, 2
    return 4, 2


def check_wrapper(name: str, dtype: torch.dtype, causal: bool, window=(-1, -1), softmax_scale=None):
    func, algorithm, packing = WRAPPERS[name]
    heads, kv_heads = head_counts(algorithm, packing)
    problem = Problem(batch=2, seq=SEQ, heads=heads, kv_heads=kv_heads, head_dim=16, dtype=dtype, causal=causal,
                      window=window, softmax_scale=softmax_scale)
    seed = fresh_seed()
    inputs = full_inputs(problem, seed)
    layout = spattn.sequence_layout(algorithm, SEQ, heads, kv_heads, causal=causal)
    failures = accuracy_failures(distributed(func, packing, layout, problem, inputs), single_rank(problem, inputs),
                                 reference(problem, inputs))
    assert not failures, f"{name} {problem} at {dist.get_world_size()} ranks, seed {seed}: {failures}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", SEPARATE)
def test_wrapper_matches_reference(name, causal, dtype):
    check_wrapper(name, dtype, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", PACKED)
def test_packed_wrapper_matches_reference(name, causal):
    check_wrapper(name, torch.float32, causal)


@pytest.mark.parametrize("name", ["ring_flash_attn_func", "zigzag_ring_flash_attn_func"])
def test_sliding_window_and_scale_match_reference(name):
    check_wrapper(name, torch.float32, causal=True, window=(5, -1), softmax_scale=0.3)


def test_groups_of_some_ranks_run_side_by_side():
    # The first half of the ranks (rounded up) and the rest each split their own sequence: a
    # communicator per group, made by its members only, and no traffic between the groups.
    world_size = dist.get_world_size()
    halves = [list(range((world_size + 1) // 2)), list(range((world_size + 1) // 2, world_size))]
    groups = [dist.new_group(ranks) if ranks else None for ranks in halves]  # collective: every rank makes both
    mine = groups[0] if dist.get_rank() in halves[0] else groups[1]
    problem = Problem(batch=1, seq=SEQ, heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, causal=True)
    seed = fresh_seed()
    inputs = full_inputs(problem, seed)
    layout = spattn.sequence_layout("zigzag", SEQ, problem.heads, problem.kv_heads, causal=True, group=mine)
    assert layout.ranks == dist.get_world_size(mine)
    results = distributed(spattn.zigzag_ring_flash_attn_func, "separate", layout, problem, inputs, group=mine)
    failures = accuracy_failures(results, single_rank(problem, inputs), reference(problem, inputs))
    assert not failures, f"zigzag over a group of {layout.ranks} of {world_size} ranks, seed {seed}: {failures}"


def test_stripe_layout_holds_every_nth_token():
    # ring-flash-attn's stripe shard: token t on rank t % N, at local index t // N.
    world_size = dist.get_world_size()
    layout = spattn.sequence_layout("stripe", SEQ, 4, 2, causal=True)
    assert layout.name == "stripe" and layout.position_stride == world_size
    full = torch.arange(SEQ).view(1, SEQ)
    for rank in range(world_size):
        assert torch.equal(layout.positions(rank), torch.arange(rank, SEQ, world_size))
        assert torch.equal(layout.shard(full, rank), full[:, rank::world_size])
    assert torch.equal(layout.unshard([layout.shard(full, rank) for rank in range(world_size)]), full)
