"""CPU tensors over oneCCL (spattn.set_cpu_transport("oneccl"), the default in jobs started without an
MPI launcher): every strategy's out and gradients are the bits it gives over MPI in the same job (the
transports move the same bytes, the kernels add in the same order), but all-gather's dk and dv, which a
reduce-scatter sums in the library's own order (equal within fp32 rounding), over the default group and
over a torch.distributed group of some of the ranks; bad transport names are refused by name. Skipped where
this build has no oneCCL communicator. test_oneccl_under_torchrun.py runs the default under torchrun."""

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import _core, communicator

pytestmark = pytest.mark.skipif(not communicator.oneccl_built(), reason="this build has no oneCCL communicator")


@pytest.fixture
def transport():
    """Sets the CPU transport for one test and puts the previous one back."""
    previous = communicator._cpu_transport
    yield spattn.set_cpu_transport
    spattn.set_cpu_transport(previous)


def out_and_gradients(function, group, seed):
    ranks = dist.get_world_size(group)
    heads, kv_heads = 2 * ranks, ranks  # Ulysses splits heads over the ranks
    torch.manual_seed(seed + dist.get_rank())
    q = torch.randn(1, 8, heads, 8, requires_grad=True)
    k = torch.randn(1, 8, kv_heads, 8, requires_grad=True)
    v = torch.randn(1, 8, kv_heads, 8, requires_grad=True)
    out = function(q, k, v, causal=True, group=group)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


@pytest.mark.parametrize("function", [spattn.zigzag_ring_flash_attn_func, spattn.ulysses_attn_func,
                                      spattn.hamilton_attn_func, spattn.allgather_attn_func])
def test_every_strategy_gives_the_bits_it_gives_over_mpi(function, transport):
    if function is spattn.hamilton_attn_func and dist.get_world_size() in (4, 6):
        pytest.skip("hamilton takes no 4 or 6 ranks")
    transport("mpi")
    over_mpi = out_and_gradients(function, None, 300)
    transport("oneccl")
    assert spattn.cpu_transport() == "oneccl"
    over_oneccl = out_and_gradients(function, None, 300)
    assert isinstance(communicator.communicator_for(torch.device("cpu"), None), _core.OnecclCommunicator)
    summed_by_the_library = {"dk", "dv"} if function is spattn.allgather_attn_func else set()
    for name, a, b in zip(("out", "dq", "dk", "dv"), over_mpi, over_oneccl):
        if name in summed_by_the_library:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * a.abs().max().item(), msg=name)
        else:
            assert torch.equal(a, b), name


def test_a_group_of_some_ranks_runs_over_its_own_oneccl_communicator(transport):
    world_size = dist.get_world_size()
    members = list(range(max(1, world_size - 1)))  # every rank but the last (all of one rank)
    group = dist.new_group(members)  # collective over every rank
    if dist.get_rank() not in members:
        return
    transport("mpi")
    over_mpi = out_and_gradients(spattn.zigzag_ring_flash_attn_func, group, 400)
    transport("oneccl")
    over_oneccl = out_and_gradients(spattn.zigzag_ring_flash_attn_func, group, 400)
    made = communicator.communicator_for(torch.device("cpu"), group)
    assert isinstance(made, _core.OnecclCommunicator) and made.size == len(members)
    for name, a, b in zip(("out", "dq", "dk", "dv"), over_mpi, over_oneccl):
        assert torch.equal(a, b), name


def test_bad_transport_names_are_refused_by_name():
    with pytest.raises(ValueError, match="cpu transport 'gloo'; allowed: auto, mpi, oneccl"):
        spattn.set_cpu_transport("gloo")


def test_auto_means_mpi_under_mpiexec(transport):
    transport("auto")
    assert spattn.cpu_transport() == "mpi"  # these tests run under mpiexec
