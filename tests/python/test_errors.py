"""Arguments spattn does not take raise clear errors on every rank, and a good call still works
after them (no rank is left waiting)."""

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import raises_on_every_rank


def shard(heads=4, kv_heads=2, local_seq=8, head_dim=8, dtype=torch.float32):
    q = torch.randn(1, local_seq, heads, head_dim, dtype=dtype)
    k = torch.randn(1, local_seq, kv_heads, head_dim, dtype=dtype)
    return q, k, torch.randn_like(k)


def test_dropout_is_rejected():
    with pytest.raises(ValueError, match=r"dropout_p=0.1 is not supported.*allowed: 0.0"):
        spattn.ring_flash_attn_func(*shard(), dropout_p=0.1)


def test_alibi_slopes_are_rejected():
    with pytest.raises(ValueError, match=r"alibi_slopes is not supported.*allowed: None"):
        spattn.zigzag_ring_flash_attn_func(*shard(), alibi_slopes=torch.ones(4))


def test_tensors_of_other_ranks_are_rejected():
    q, k, v = shard()
    with pytest.raises(ValueError, match=r"q has shape \(8, 4, 8\); expected 4 dimensions"):
        spattn.ulysses_attn_func(q[0], k, v)


def test_heads_not_divisible_by_kv_heads_is_rejected():
    with pytest.raises(spattn.SpattnError, match=r"heads \(3\) must be divisible by kv_heads \(2\)"):
        spattn.ring_flash_attn_func(*shard(heads=3, kv_heads=2))


def test_mismatched_key_shape_is_rejected():
    q, k, v = shard()
    with pytest.raises(spattn.SpattnError, match=r"v has shape .*; expected"):
        spattn.ring_flash_attn_func(q, k, v[..., :4].contiguous())


def test_length_that_does_not_split_into_zigzag_chunks_is_rejected():
    # 3 tokens per rank: 3N tokens never cut into 2N equal chunks.
    with pytest.raises(spattn.SpattnError, match="zigzag"):
        spattn.zigzag_ring_flash_attn_func(*shard(local_seq=3))


def test_stripe_refuses_a_sliding_window_naming_it():
    with pytest.raises(spattn.SpattnError, match=r"stripe takes a causal mask or none, not a sliding window "
                                                 r"\(window_left 4, window_right 0\)"):
        spattn.stripe_flash_attn_func(*shard(), causal=True, window_size=(4, 0))


def test_unsupported_dtype_is_rejected():
    with pytest.raises(TypeError, match=r"q is torch.float64; allowed: torch.float32, torch.float16, torch.bfloat16"):
        spattn.ring_flash_attn_func(*shard(dtype=torch.float64))


def test_packed_tensor_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match=r"qkv has shape .*; expected \(B, S_local, 3, heads, D\)"):
        spattn.ring_flash_attn_qkvpacked_func(torch.randn(1, 8, 2, 4, 8))


def test_a_group_that_is_not_a_process_group_is_rejected():
    with pytest.raises(ValueError, match="is not a torch.distributed process group"):
        spattn.ring_flash_attn_func(*shard(), group=object())


def test_a_group_without_this_rank_is_rejected():
    # new_group is collective over every rank: each rank makes the group of all the others, and
    # gets torch's placeholder for the one it is not in.
    world_size = dist.get_world_size()
    groups = [dist.new_group([rank for rank in range(world_size) if rank != excluded]) if world_size > 1
              else dist.GroupMember.NON_GROUP_MEMBER for excluded in range(world_size)]
    with pytest.raises(ValueError, match="is not a torch.distributed process group"):
        spattn.ring_flash_attn_func(*shard(), group=groups[dist.get_rank()])


def test_tensors_on_other_devices_are_rejected():
    q, k, v = (x.to("meta") for x in shard())
    with pytest.raises(ValueError, match=r"tensors on meta; allowed: cpu \(over MPI or oneCCL\) and cuda \(over NCCL\)"):
        spattn.ring_flash_attn_func(q, k, v)


def test_mixed_devices_are_rejected():
    q, k, v = shard()
    with pytest.raises(ValueError, match="k is on meta but q is on cpu"):
        spattn.ring_flash_attn_func(q, k.to("meta"), v)


@pytest.mark.skipif(spattn.is_available("cuda"), reason="this build has the CUDA path")
def test_cuda_tensors_need_a_cuda_build():
    # Reached before any CUDA call, so it needs no GPU.
    with pytest.raises(RuntimeError, match="no NCCL communicator: reinstall with SPATTN_CUDA=ON"):
        spattn.communicator.nccl_communicator(None, torch.device("cuda", 0))


def test_good_call_after_errors():
    out = spattn.ring_flash_attn_func(*shard(), causal=True)
    assert out.shape == (1, 8, 4, 8) and torch.isfinite(out).all()
    dist.barrier()


def test_a_bad_argument_on_one_rank_fails_every_rank():
    # Only the last rank asks for dropout: every rank raises, naming it, and none is left waiting.
    last = dist.get_world_size() - 1
    dropout = 0.5 if dist.get_rank() == last else 0.0
    with raises_on_every_rank(last, "dropout_p=0.5 is not supported"):
        spattn.zigzag_ring_flash_attn_func(*shard(), dropout_p=dropout, causal=True)
    out = spattn.zigzag_ring_flash_attn_func(*shard(), causal=True)  # the ranks are still in step
    assert torch.isfinite(out).all()


def test_ranks_that_disagree_are_told_which_field_differs():
    if dist.get_world_size() < 2:
        pytest.skip("one rank cannot disagree with itself")
    # Rank 0 holds 8 tokens, the others 6: each shape is valid alone, together they must refuse.
    world_size = dist.get_world_size()
    local_seq = 8 if dist.get_rank() == 0 else 6
    with pytest.raises(spattn.SpattnError, match=f"ranks disagree on the call: rank 0 has seq={8 * world_size} but "
                                                 f"rank 1 has seq={6 * world_size}"):
        spattn.ring_flash_attn_func(*shard(local_seq=local_seq), causal=True)
    out = spattn.ring_flash_attn_func(*shard(), causal=True)  # the ranks are still in step
    assert torch.isfinite(out).all()


def test_a_rank_that_gave_up_on_its_peers_raises_its_own_error_type():
    # Raised by the communicators when a peer never came (C++ spattn::TimeoutError; exercised by
    # the StalledRank tests and the program's FaultyRank tests): callers catch it apart from the
    # errors all ranks agree on, or with them as a SpattnError.
    assert issubclass(spattn.SpattnTimeoutError, spattn.SpattnError)
    assert spattn.SpattnTimeoutError is not spattn.SpattnError
