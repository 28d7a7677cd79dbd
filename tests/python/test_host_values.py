"""Index tensors are read back from the device once: host_values keeps a tensor's values while it
is the same, unmodified object, and the llama3 functions never read back what their preparation
made."""

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import host_values as host_values_module
from spattn.host_values import host_values


@pytest.fixture
def reads(monkeypatch):
    """The ids of the tensors whose tolist() ran, in order."""
    seen = []
    original = torch.Tensor.tolist

    def counting_tolist(self):
        seen.append(id(self))
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    return seen


def test_a_tensor_is_read_once_while_unchanged(reads):
    cu_seqlens = torch.tensor([0, 3, 7, 8], dtype=torch.int32)
    assert host_values(cu_seqlens) == (0, 3, 7, 8)
    assert host_values(cu_seqlens) == (0, 3, 7, 8)
    assert reads == [id(cu_seqlens)]
    cu_seqlens[1] = 4  # an in-place change: read again
    assert host_values(cu_seqlens) == (0, 4, 7, 8)
    assert reads == [id(cu_seqlens)] * 2


def test_equal_values_in_another_tensor_are_read_for_it(reads):
    first, second = torch.tensor([0, 5]), torch.tensor([0, 5])
    assert host_values(first) == host_values(second) == (0, 5)
    assert reads == [id(first), id(second)]


def test_only_the_last_few_tensors_are_kept():
    tensors = [torch.tensor([0, length]) for length in range(1, host_values_module.TENSORS_KEPT + 5)]
    for tensor in tensors:
        host_values(tensor)
    assert len(host_values_module._read) == host_values_module.TENSORS_KEPT
    assert all(entry[0] is not tensors[0] for entry in host_values_module._read.values())


def test_llama3_calls_never_read_back_what_the_preparation_made(reads):
    ranks, rank = dist.get_world_size(), dist.get_rank()
    cu_seqlens = torch.tensor([0, 1, 2 * ranks + 1, 4 * ranks], dtype=torch.int32)  # 4 tokens per rank
    prepared = spattn.llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, True, rank, ranks)
    made = {id(prepared[0]), id(prepared[1])}
    q, k, v = torch.randn(4, 2, 8), torch.randn(4, 1, 8), torch.randn(4, 1, 8)
    for _ in range(3):  # as in every layer of a model
        spattn.llama3_flash_attn_varlen_func(q, k, v, *prepared[:4], 1, prepared[4], causal=True)
    assert not made & set(reads)
