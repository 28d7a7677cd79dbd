"""The communicators that plans run over: CPU tensors over MPI, CUDA tensors over NCCL.

CPU: every plan of this process shares one spattn MpiCommunicator over MPI_COMM_WORLD (created,
and MPI initialized, at first use). torch.distributed is optional: where it is initialized, its
world must be MPI's world, rank for rank, as it is when launched with mpiexec and set up by
spattn.setup_distributed().

CUDA: one spattn NcclCommunicator per (torch.distributed group, GPU), made at the first call on
that group: the group's first rank makes an NCCL unique id and torch.distributed broadcasts it over
the group, so any group works, whatever launched the processes (torchrun, mpiexec, ...).
"""

from __future__ import annotations

import atexit
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core

_world: Optional[_core.MpiCommunicator] = None
# (group, GPU index) -> its NCCL communicator. The group object is the key: torch keeps it alive.
_nccl: Dict[Tuple[Any, int], Any] = {}
# Called before the world is released at exit (the plan cache registers its clear()).
_release_hooks: List[Callable[[], None]] = []


def mpi_world() -> _core.MpiCommunicator:
    """spattn's communicator over MPI_COMM_WORLD, created at the first call (collective then)."""
    global _world
    if _world is None:
        _world = _core.MpiCommunicator()
    return _world


def on_release(hook: Callable[[], None]) -> None:
    """Runs `hook` at exit before the world is released (plans must go first)."""
    _release_hooks.append(hook)


@atexit.register
def _release() -> None:
    # Plans and the communicator go while Python is still whole, before MPI_Finalize (which
    # spattn registers with the C library's atexit when it initialized MPI).
    global _world
    for hook in _release_hooks:
        hook()
    _nccl.clear()
    _world = None


def _is_world_group(group: Any) -> bool:
    if group is None:
        return True
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return group is dist.group.WORLD or group == dist.distributed_c10d._get_default_group()


def checked_world(group: Any) -> _core.MpiCommunicator:
    """The MPI world for a call with `group`. Raises ValueError unless group is None or
    torch.distributed's default (WORLD) group, and RuntimeError when torch.distributed's world is
    not MPI's."""
    if not _is_world_group(group):
        raise ValueError(
            f"group={group!r} is not supported in this version: spattn runs CPU tensors over its MPI "
            "communicator of all ranks; pass group=None or torch.distributed.group.WORLD")
    world = mpi_world()
    if dist.is_available() and dist.is_initialized():
        torch_rank, torch_size = dist.get_rank(), dist.get_world_size()
        if (torch_rank, torch_size) != (world.rank, world.size):
            raise RuntimeError(
                f"torch.distributed has rank {torch_rank} of {torch_size} but spattn's MPI world has rank "
                f"{world.rank} of {world.size}: CPU tensors run over MPI, so launch with mpiexec (every "
                "rank one MPI process) and call spattn.setup_distributed(); torchrun without mpiexec "
                "is not supported for CPU tensors in this version")
    return world


def nccl_communicator(group: Any, device: torch.device) -> Any:
    """spattn's NCCL communicator over the ranks of `group` (None: torch.distributed's default
    group) on `device`, made at the first call for this (group, GPU) and collective over the group
    then. Needs torch.distributed to be initialized (spattn.setup_distributed() does it)."""
    if not hasattr(_core, "NcclCommunicator"):
        raise RuntimeError("this build of spattn has no NCCL communicator: reinstall with SPATTN_CUDA=ON "
                           "where nvcc and NCCL are (SPATTN_CUDA=ON pip install .)")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("CUDA tensors run over NCCL communicators made from a torch.distributed group: "
                           "call spattn.setup_distributed() (or torch.distributed.init_process_group) first")
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (group, index)
    communicator = _nccl.get(key)
    if communicator is None:
        unique_id = [_core.make_nccl_unique_id() if dist.get_rank(group) == 0 else None]
        dist.broadcast_object_list(unique_id, src=dist.get_global_rank(group, 0), group=group,
                                   device=torch.device("cuda", index))
        communicator = _core.NcclCommunicator(dist.get_rank(group), dist.get_world_size(group), unique_id[0], index)
        _nccl[key] = communicator
    return communicator


def communicator_for(device: torch.device, group: Any) -> Any:
    """The communicator that tensors on `device` run over for `group`: MPI's world for CPU
    tensors, an NCCL communicator of the group for CUDA tensors."""
    if device.type == "cuda":
        return nccl_communicator(group, device)
    if device.type != "cpu":
        raise ValueError(f"tensors on {device}; allowed: cpu (over MPI) and cuda (over NCCL)")
    return checked_world(group)


def group_size(group: Any) -> int:
    """The ranks of `group`: torch.distributed's count where it is initialized, else MPI's world."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    return checked_world(group).size


_AGREED_ERRORS = {"ValueError": ValueError, "TypeError": TypeError}


def raise_on_every_rank(error: Optional[Exception], communicator: Any, group: Any) -> None:
    """Every rank's verdict on its own arguments, exchanged before any rank starts a collective of
    the call: when any rank has an error, every rank raises it (ValueError or TypeError, naming the
    rank), so that no rank is left waiting for one that gave up. One small collective per call:
    over MPI for a call on the MPI world (CPU tensors), else over torch.distributed's `group` of
    the call's (NCCL) communicator."""
    mine = f"{type(error).__name__}|{error}" if error is not None else ""
    if isinstance(communicator, _core.MpiCommunicator):
        verdicts: List[Any] = [data.decode() for data in communicator.all_gather_bytes(mine.encode())]
    else:
        verdicts = [None] * dist.get_world_size(group)
        dist.all_gather_object(verdicts, mine, group=group)
    for rank, verdict in enumerate(verdicts):
        if verdict:
            kind, _, message = verdict.partition("|")
            if error is not None:
                raise error
            raise _AGREED_ERRORS.get(kind, ValueError)(f"rank {rank}: {message}")
