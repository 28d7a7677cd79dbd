"""deterministic=, flash-attn's flag, reaches the C++ core (AttentionOptions::deterministic): on the CPU,
whose kernels add in one order whatever the threads, it changes no bit of out or of the gradients and
two runs agree bit for bit; ranks that disagree on it refuse the call, naming the field."""

import pytest
import torch
import torch.distributed as dist

import spattn


def shard(local_seq=8, head_dim=8):
    # Heads that every strategy here splits at any rank count (Ulysses splits them over the ranks).
    heads, kv_heads = 2 * dist.get_world_size(), dist.get_world_size()
    torch.manual_seed(100 + dist.get_rank())
    q = torch.randn(1, local_seq, heads, head_dim, requires_grad=True)
    k = torch.randn(1, local_seq, kv_heads, head_dim, requires_grad=True)
    v = torch.randn(1, local_seq, kv_heads, head_dim, requires_grad=True)
    return q, k, v


def out_and_gradients(function, deterministic):
    q, k, v = shard()
    out = function(q, k, v, causal=True, deterministic=deterministic)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


@pytest.mark.parametrize("function", [spattn.zigzag_ring_flash_attn_func, spattn.ulysses_attn_func,
                                      spattn.hamilton_attn_func])
def test_deterministic_runs_give_the_bits_of_the_default(function):
    if function is spattn.hamilton_attn_func and dist.get_world_size() in (4, 6):
        pytest.skip("hamilton takes no 4 or 6 ranks")
    first, second = out_and_gradients(function, True), out_and_gradients(function, True)
    default = out_and_gradients(function, False)
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), first, second, default):
        assert torch.equal(a, b), f"{name} of a second deterministic run"
        assert torch.equal(a, c), f"{name} of the default run"


def test_ranks_that_disagree_on_deterministic_refuse_naming_it():
    if dist.get_world_size() < 2:
        pytest.skip("one rank cannot disagree with itself")
    deterministic = dist.get_rank() == 1
    with pytest.raises(spattn.SpattnError, match="ranks disagree on the call: rank 0 has deterministic=false but "
                                                 "rank 1 has deterministic=true"):
        spattn.ring_flash_attn_func(*shard(), causal=True, deterministic=deterministic)
    out = spattn.ring_flash_attn_func(*shard(), causal=True)  # the ranks are still in step
    assert torch.isfinite(out).all()
