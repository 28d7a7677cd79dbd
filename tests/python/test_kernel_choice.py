"""kernel=, the choice of block kernels: the CPU runs "auto" (its one set of kernels) and refuses
"own" and "cudnn" on every rank with the C++ core's message; an unknown name raises naming the
allowed ones, even when one rank alone passes it."""

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import raises_on_every_rank


def shard(heads=4, kv_heads=2, local_seq=8, head_dim=8):
    torch.manual_seed(dist.get_rank())
    q = torch.randn(1, local_seq, heads, head_dim)
    k = torch.randn(1, local_seq, kv_heads, head_dim)
    return q, k, torch.randn_like(k)


def test_auto_runs_on_the_cpu_as_the_default_does():
    q, k, v = shard()
    out = spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True, kernel="auto")
    assert torch.equal(out, spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True))


@pytest.mark.parametrize("kernel, kernels", [("own", "spattn's own Hopper kernels"),
                                             ("cudnn", "cuDNN's fused attention")])
def test_cuda_kernels_on_the_cpu_raise_the_cores_message(kernel, kernels):
    with pytest.raises(spattn.SpattnError, match=rf"kernel {kernel} names CUDA kernels \({kernels}\) and cannot run on "
                                                 r"cpu; allowed there: auto"):
        spattn.ring_flash_attn_func(*shard(), kernel=kernel)
    with pytest.raises(spattn.SpattnError, match=rf"kernel {kernel} names CUDA kernels"):
        spattn.UlyssesAttention(kernel=kernel)(*shard(heads=6, kv_heads=6))


def test_unknown_kernel_names_the_allowed_ones():
    # A Python error in the library's words, without the C++ error's 'spattn: ' in front.
    with pytest.raises(ValueError, match=r"^unknown kernel 'bogus'; allowed: auto, own, cudnn$"):
        spattn.hamilton_attn_func(*shard(), kernel="bogus")
    with pytest.raises(ValueError, match=r"unknown kernel 'None'; allowed: auto, own, cudnn"):
        spattn.ring_flash_attn_kvpacked_func(shard()[0], torch.stack(shard()[1:], dim=2), kernel=None)


def test_an_unknown_kernel_on_one_rank_fails_every_rank():
    last = dist.get_world_size() - 1
    kernel = "bogus" if dist.get_rank() == last else "auto"
    with raises_on_every_rank(last, "unknown kernel 'bogus'; allowed: auto, own, cudnn"):
        spattn.usp_attn_func(*shard(), causal=True, kernel=kernel)
    assert torch.isfinite(spattn.usp_attn_func(*shard(), causal=True)).all()  # the ranks are still in step


def test_the_core_parses_kernel_names():
    assert [spattn._core.parse_kernel_choice(name) for name in ("auto", "own", "cudnn")] == ["auto", "own", "cudnn"]
    with pytest.raises(spattn.SpattnError, match=r"unknown kernel 'fast'; allowed: auto, own, cudnn"):
        spattn._core.parse_kernel_choice("fast")
