"""The MPI communicator that CPU tensors run over, and the check that a torch.distributed group
names the same ranks.

Every plan of this process shares one spattn MpiCommunicator over MPI_COMM_WORLD (created, and
MPI initialized, at first use). torch.distributed is optional: where it is initialized, its world
must be MPI's world, rank for rank, as it is when launched with mpiexec and set up by
spattn.setup_distributed().
"""

from __future__ import annotations

import atexit
from typing import Any, Callable, List, Optional

import torch.distributed as dist

from . import _core

_world: Optional[_core.MpiCommunicator] = None
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
