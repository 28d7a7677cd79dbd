"""yunchang's interface (set_seq_parallel_pg, LongContextAttention) and UlyssesAttention's two index
conventions: every split of the ranks into Ulysses x ring matches the fp64 reference in yunchang's
token layout, the groups are yunchang's, and what spattn lacks is refused by name."""

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import Problem, accuracy_failures, distributed, fresh_seed, full_inputs, reference, single_rank

SEQ = 24  # 2 x ring degree chunks, each split over the Ulysses degree, at 1, 2 and 3 ranks


def degree_pairs(world_size):
    """(sp_ulysses_degree, sp_ring_degree) with product world_size."""
    return [(ulysses, world_size // ulysses) for ulysses in range(1, world_size + 1) if world_size % ulysses == 0]


def yunchang_positions(ring_impl_type, seq, rank, ulysses, ring):
    """The global positions of `rank`'s tokens as yunchang's extract_local functions cut them."""
    positions = torch.arange(seq)
    if ring_impl_type == "basic":
        return positions.chunk(ulysses * ring)[rank]
    chunks = positions.chunk(2 * ring)
    ring_rank, ulysses_rank = rank // ulysses, rank % ulysses
    return torch.cat([chunks[ring_rank], chunks[2 * ring - 1 - ring_rank]]).chunk(ulysses)[ulysses_rank]


@pytest.mark.parametrize("ring_impl_type", ["basic", "zigzag"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_split_matches_reference_in_yunchangs_layout(ring_impl_type, causal):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    # H and HK split over any Ulysses degree dividing the world; GQA 2:1.
    problem = Problem(batch=2, seq=SEQ, heads=2 * world_size, kv_heads=world_size, head_dim=16,
                      dtype=torch.float32, causal=causal)
    for ulysses, ring in degree_pairs(world_size):
        spattn.set_seq_parallel_pg(ulysses, ring, rank, world_size)
        assert dist.get_process_group_ranks(spattn.PROCESS_GROUP.ULYSSES_PG) == \
            list(range(rank - rank % ulysses, rank - rank % ulysses + ulysses))
        assert dist.get_process_group_ranks(spattn.PROCESS_GROUP.RING_PG) == list(range(rank % ulysses, world_size, ulysses))
        module = spattn.LongContextAttention(ring_impl_type=ring_impl_type, use_pack_qkv=True, use_sync=True,
                                             attn_type="fa")
        # The layout of the strategy the module runs is yunchang's.
        layout = spattn.sequence_layout("usp", SEQ, problem.heads, problem.kv_heads, causal=causal, inner=ulysses,
                                        across=module.across)
        for member in range(world_size):
            assert torch.equal(layout.positions(member), yunchang_positions(ring_impl_type, SEQ, member, ulysses, ring))
        seed = fresh_seed()
        inputs = full_inputs(problem, seed)
        failures = accuracy_failures(distributed(module, "separate", layout, problem, inputs),
                                     single_rank(problem, inputs), reference(problem, inputs))
        assert not failures, f"{ring_impl_type} {ulysses}x{ring} {problem}, seed {seed}: {failures}"


def test_replicas_of_data_parallelism_each_attend_their_own_sequence():
    # Ulysses x ring = 1 x 1: every rank is its own sequence-parallel replica with its own inputs.
    world_size, rank = dist.get_world_size(), dist.get_rank()
    spattn.set_seq_parallel_pg(1, 1, rank, world_size)
    replica = spattn.PROCESS_GROUP.SP_PG
    assert dist.get_process_group_ranks(replica) == [rank]
    problem = Problem(batch=1, seq=SEQ, heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, causal=True)
    seed = fresh_seed() + rank  # a different sequence on every replica
    inputs = full_inputs(problem, seed)
    module = spattn.LongContextAttention(ring_impl_type="zigzag")
    layout = spattn.sequence_layout("usp", SEQ, 4, 2, causal=True, group=replica, inner=1, across="zigzag")
    results = distributed(lambda *tensors, group=None, **options: module(*tensors, **options), "separate", layout,
                          problem, inputs, group=replica)
    failures = accuracy_failures(results, single_rank(problem, inputs), reference(problem, inputs))
    assert not failures, f"rank {rank}, seed {seed}: {failures}"


def test_what_spattn_lacks_is_refused_by_name(monkeypatch):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    with pytest.raises(ValueError, match="use_ulysses_low=False is not supported.*allowed: True"):
        spattn.set_seq_parallel_pg(1, world_size, rank, world_size, use_ulysses_low=False)
    with pytest.raises(ValueError, match=f"world_size={world_size + 1} but torch.distributed has {world_size} ranks"):
        spattn.set_seq_parallel_pg(1, 1, rank, world_size + 1)
    with pytest.raises(ValueError, match=f"is not a multiple of sp_ulysses_degree x sp_ring_degree = 1 x "
                                         f"{world_size + 1}"):
        spattn.set_seq_parallel_pg(1, world_size + 1, rank, world_size)
    with pytest.raises(ValueError, match="sp_ring_degree=0; expected a positive int"):
        spattn.set_seq_parallel_pg(1, 0, rank, world_size)
    spattn.set_seq_parallel_pg(world_size, 1, rank, world_size)
    with pytest.raises(ValueError, match="ring_impl_type='strip' \\(the stripe layout is not in spattn yet\\); "
                                         "allowed: basic, basic_pytorch, zigzag"):
        spattn.LongContextAttention(ring_impl_type="strip")
    with pytest.raises(ValueError, match="allowed: scatter_idx=2, gather_idx=1"):
        spattn.LongContextAttention(scatter_idx=1, gather_idx=2)
    module = spattn.LongContextAttention()
    q = torch.randn(1, 4, 2 * world_size, 8)
    with pytest.raises(ValueError, match="softcap=30.0 is not supported"):
        module(q, q, q, softcap=30.0)
    monkeypatch.setattr(spattn.PROCESS_GROUP, "SP_PG", None)
    with pytest.raises(RuntimeError, match="call spattn.set_seq_parallel_pg"):
        spattn.LongContextAttention()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ulysses_sequence_first_gives_the_same_bits_as_batch_first(causal):
    world_size = dist.get_world_size()
    problem = Problem(batch=2, seq=SEQ, heads=2 * world_size, kv_heads=world_size, head_dim=16,
                      dtype=torch.float32, causal=causal)
    layout = spattn.sequence_layout("ulysses", SEQ, problem.heads, problem.kv_heads, causal=causal)
    inputs = full_inputs(problem, fresh_seed())
    q, k, v, dout = (layout.shard(inputs[name], dist.get_rank()) for name in ("q", "k", "v", "dout"))
    results = {}
    for gather_idx in (1, 0):
        module = spattn.UlyssesAttention(None, scatter_idx=2, gather_idx=gather_idx)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        arguments = leaves if gather_idx == 1 else [x.transpose(0, 1) for x in leaves]  # (S_local, B, H, D)
        out, lse, _ = module(*arguments, causal=causal, return_attn_probs=True)
        out = out if gather_idx == 1 else out.transpose(0, 1)
        out.backward(dout)
        results[gather_idx] = [out, lse] + [leaf.grad for leaf in leaves]
    for batch_first, sequence_first in zip(results[1], results[0]):
        assert torch.equal(batch_first, sequence_first)
