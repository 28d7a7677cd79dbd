"""The package around the wrappers: build information, layouts, the plan cache, set-up, stubs."""

import ast
import os

import torch
import torch.distributed as dist

import spattn
from spattn import _core


def test_algorithms_and_availability():
    assert spattn.algorithms() == ["ring", "zigzag", "stripe", "ulysses", "hamilton", "hamilton2", "allgather", "usp"]
    assert spattn.is_available("cpu") and spattn.is_available("mpi")
    assert spattn.is_available("cuda") == spattn.is_available("nccl") == hasattr(_core, "NcclCommunicator")
    try:
        spattn.is_available("tpu")
        raise AssertionError("expected ValueError")
    except ValueError as error:
        assert "allowed: cpu, mpi, cuda, nccl" in str(error)


def test_device_info():
    info = spattn.device_info()
    assert info["version"] == spattn.__version__
    assert "cpu" in info["kernel_backends"] and "mpi" in info["communicators"]
    assert info["python_backends"] == ["cpu", "mpi"] + (["cuda", "nccl"] if spattn.is_available("cuda") else [])
    assert info["torch"] == torch.__version__


def test_setup_distributed_matches_mpi(world):
    rank, world_size, device = world
    assert (rank, world_size) == (dist.get_rank(), dist.get_world_size())
    launch = spattn.launch_environment()
    assert (launch.rank, launch.world_size) == (rank, world_size)
    assert device == torch.device("cpu")
    assert spattn.setup_distributed() == world  # a second call keeps the initialized group


def test_zigzag_layout_holds_chunks_r_and_2n_minus_1_minus_r(world):
    rank, world_size, _ = world
    chunk = 4
    layout = spattn.sequence_layout("zigzag", 2 * world_size * chunk, heads=4, kv_heads=2)
    assert layout.name == "zigzag" and layout.ranks == world_size
    expected = [(rank * chunk, chunk, 0), ((2 * world_size - 1 - rank) * chunk, chunk, chunk)]
    assert layout.chunks(rank) == expected


def test_ring_layout_is_contiguous(world):
    rank, world_size, _ = world
    layout = spattn.sequence_layout("ring", 6 * world_size, heads=4)
    assert layout.positions(rank).tolist() == list(range(6 * rank, 6 * rank + 6))


def test_shard_and_unshard_are_inverse(world):
    rank, world_size, _ = world
    for algorithm in ("ring", "zigzag", "usp"):
        layout = spattn.sequence_layout(algorithm, 4 * world_size, heads=4, kv_heads=2, causal=True)
        full = torch.arange(2 * 4 * world_size * 3, dtype=torch.float32).reshape(2, 4 * world_size, 3)
        shards = [layout.shard(full, r) for r in range(world_size)]
        assert torch.equal(layout.unshard(shards), full)
        assert torch.equal(shards[rank][:, :, 0], full[:, layout.positions(rank), 0])


def test_plans_are_cached_per_shape_dtype_and_options():
    spattn.clear_plan_cache()
    q = torch.randn(1, 4, 2, 8)
    k = torch.randn(1, 4, 1, 8)
    spattn.ring_flash_attn_func(q, k, k)
    spattn.ring_flash_attn_func(q, k, k)
    assert spattn.cached_plan_count() == 1
    spattn.ring_flash_attn_func(q, k, k, causal=True)
    spattn.ring_flash_attn_func(q.bfloat16(), k.bfloat16(), k.bfloat16())
    assert spattn.cached_plan_count() == 3


def test_return_attn_probs_gives_out_lse_none():
    q = torch.randn(1, 4, 2, 8, requires_grad=True)
    k = torch.randn(1, 4, 2, 8, requires_grad=True)
    out, lse, probs = spattn.ring_flash_attn_func(q, k, k, return_attn_probs=True)
    assert probs is None and out.shape == q.shape
    assert lse.shape == (1, 2, 4) and lse.dtype == torch.float32 and not lse.requires_grad
    assert out.requires_grad


def test_stubs_name_everything_the_module_has():
    stub_path = os.path.join(os.path.dirname(spattn.__file__), "_core.pyi")
    with open(stub_path) as stub:
        tree = ast.parse(stub.read())
    stubbed = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    public = {name for name in dir(_core) if not name.startswith("_")}
    cuda_only = {"make_nccl_unique_id", "NcclCommunicator"}
    oneccl_only = {"OnecclCommunicator"}  # built where oneCCL was found
    assert stubbed == (public | (set() if spattn.is_available("cuda") else cuda_only)
                       | (set() if spattn.communicator.oneccl_built() else oneccl_only))
