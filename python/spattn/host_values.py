"""The values of small index tensors (cu_seqlens) on the host, read once per tensor. Reading a
CUDA tensor back synchronizes the device with the host, and a model passes the same cu_seqlens to
every layer: each tensor is read the first time it comes, and its values are kept while it is the
same, unmodified object (torch counts in-place changes in Tensor._version)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence, Tuple

import torch

# The last few tensors read, by id, with the tensor itself (which keeps its id from being reused)
# and its version at the read. A training step packs one batch: a handful of tensors at a time.
TENSORS_KEPT = 16
_read: "OrderedDict[int, Tuple[torch.Tensor, int, Tuple[int, ...]]]" = OrderedDict()


def remember_host_values(tensor: torch.Tensor, values: Sequence[int]) -> None:
    """Records `values` as what `tensor` holds, for a tensor just made from them on the host."""
    _read[id(tensor)] = (tensor, tensor._version, tuple(int(value) for value in values))
    _read.move_to_end(id(tensor))
    while len(_read) > TENSORS_KEPT:
        _read.popitem(last=False)


def host_values(tensor: torch.Tensor) -> Tuple[int, ...]:
    """tensor.tolist() of a 1-D integer tensor as a tuple of ints, read from the device once."""
    found = _read.get(id(tensor))
    if found is not None and found[0] is tensor and found[1] == tensor._version:
        _read.move_to_end(id(tensor))
        return found[2]
    remember_host_values(tensor, tensor.tolist())
    return _read[id(tensor)][2]
