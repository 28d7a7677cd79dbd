"""The communicators that plans run over: CPU tensors over MPI or oneCCL, CUDA tensors over NCCL.

CPU, the transport set_cpu_transport() chooses (SPATTN_CPU_TRANSPORT at import; default auto: oneCCL
in a job started without an MPI launcher, such as torchrun's, where this build has it, else MPI):
- MPI: spattn MpiCommunicators: one over MPI_COMM_WORLD (created, and MPI initialized, at first use)
  for the default group, and one per other torch.distributed group over that group's ranks, made at
  the group's first call (collective over its members only). torch.distributed is optional for the
  world: where it is initialized, its world must be MPI's world, rank for rank, as it is when
  launched with mpiexec and set up by spattn.setup_distributed().
- oneCCL: one spattn OnecclCommunicator per torch.distributed group, made at the group's first
  call: the group's first rank opens oneCCL's key-value store and torch.distributed broadcasts its
  address over the group, so any group of any launcher works (torch.distributed must be initialized).

CUDA: one spattn NcclCommunicator per (torch.distributed group, GPU), made at the first call on
that group: the group's first rank makes an NCCL unique id and torch.distributed broadcasts it over
the group, so any group works, whatever launched the processes (torchrun, mpiexec, ...).
"""

from __future__ import annotations

import atexit
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core

_world: Optional[_core.MpiCommunicator] = None
# (group, GPU index) -> its NCCL communicator. The group object is the key: torch keeps it alive.
_nccl: Dict[Tuple[Any, int], Any] = {}
# group -> the MPI communicator over its ranks, for groups other than the world.
_mpi_groups: Dict[Any, _core.MpiCommunicator] = {}
# group -> its oneCCL communicator (CPU tensors with the oneccl transport).
_oneccl: Dict[Any, Any] = {}
CPU_TRANSPORTS = ("auto", "mpi", "oneccl")
_cpu_transport = "auto"
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
    # Plans and the communicators go while Python is still whole, before MPI_Finalize (which
    # spattn registers with the C library's atexit when it initialized MPI).
    global _world
    for hook in _release_hooks:
        hook()
    _nccl.clear()
    _oneccl.clear()
    _mpi_groups.clear()
    _world = None


def _is_world_group(group: Any) -> bool:
    if group is None:
        return True
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return group is dist.group.WORLD or group == dist.distributed_c10d._get_default_group()


def _check_torch_world_is_mpis(world: _core.MpiCommunicator) -> None:
    torch_rank, torch_size = dist.get_rank(), dist.get_world_size()
    if (torch_rank, torch_size) != (world.rank, world.size):
        raise RuntimeError(
            f"torch.distributed has rank {torch_rank} of {torch_size} but spattn's MPI world has rank "
            f"{world.rank} of {world.size}: CPU tensors run over MPI, so launch with mpiexec (every "
            "rank one MPI process) and call spattn.setup_distributed(), or run them over oneCCL "
            "(spattn.set_cpu_transport('oneccl'), the default under torchrun where this build has it)")


def mpi_communicator(group: Any) -> _core.MpiCommunicator:
    """spattn's MPI communicator for CPU tensors of `group`: MPI's world for None or
    torch.distributed's default group, else one over the group's ranks, made at this group's first
    use (collective over the group's ranks only) and kept. Raises RuntimeError when
    torch.distributed's world is not MPI's, ValueError for a group that is not one or that this rank
    is not in."""
    world = mpi_world()
    torch_initialized = dist.is_available() and dist.is_initialized()
    if torch_initialized:
        _check_torch_world_is_mpis(world)
    if _is_world_group(group):
        return world
    communicator = _mpi_groups.get(group)
    if communicator is not None:
        return communicator
    if not torch_initialized or not isinstance(group, dist.ProcessGroup):
        raise ValueError(f"group={group!r} is not a torch.distributed process group; pass None (every rank) or "
                         "a group from torch.distributed.new_group")
    if dist.get_rank(group) < 0:
        raise ValueError(f"this rank ({dist.get_rank()}) is not in group {group!r} (ranks "
                         f"{dist.get_process_group_ranks(group)}): only its members may call with it")
    # torch's world is MPI's (checked above), so the group's global ranks are MPI ranks.
    communicator = world.over_ranks(dist.get_process_group_ranks(group))
    _mpi_groups[group] = communicator
    return communicator


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


def oneccl_built() -> bool:
    """Whether this build has the oneCCL communicator (built where oneCCL was found)."""
    return hasattr(_core, "OnecclCommunicator")


def set_cpu_transport(name: str) -> None:
    """The transport of CPU tensors from the next call on: "mpi", "oneccl" or "auto" (oneCCL in a job
    started without an MPI launcher, such as torchrun's, where this build has it; else MPI), as
    `spattn run --transport` chooses for the CLI. Plans already made keep their communicator. Raises
    ValueError for another name, RuntimeError for oneccl where this build has none."""
    global _cpu_transport
    if name not in CPU_TRANSPORTS:
        raise ValueError(f"cpu transport {name!r}; allowed: {', '.join(CPU_TRANSPORTS)}")
    if name == "oneccl" and not oneccl_built():
        raise RuntimeError("this build of spattn has no oneCCL communicator: install oneCCL "
                           "(scripts/install-dependencies.sh) and reinstall spattn")
    _cpu_transport = name


def cpu_transport() -> str:
    """The transport CPU tensors run over now: "mpi" or "oneccl" (set_cpu_transport's "auto" resolved)."""
    if _cpu_transport != "auto":
        return _cpu_transport
    return "oneccl" if oneccl_built() and _core.launched_by_environment() else "mpi"


def oneccl_communicator(group: Any) -> Any:
    """spattn's oneCCL communicator over the ranks of `group` (None: torch.distributed's default
    group), made at the group's first call and collective over the group then. Needs
    torch.distributed to be initialized (spattn.setup_distributed() does it)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("CPU tensors over oneCCL need torch.distributed: call spattn.setup_distributed() "
                           "(or torch.distributed.init_process_group) first")
    group = group if group is not None else dist.distributed_c10d._get_default_group()
    communicator = _oneccl.get(group)
    if communicator is None:
        if dist.get_rank(group) < 0:
            raise ValueError(f"this rank ({dist.get_rank()}) is not in group {group!r} (ranks "
                             f"{dist.get_process_group_ranks(group)}): only its members may call with it")

        def share(address: bytes) -> bytes:
            shared = [address if dist.get_rank(group) == 0 else None]
            dist.broadcast_object_list(shared, src=dist.get_global_rank(group, 0), group=group)
            return shared[0]

        communicator = _core.OnecclCommunicator(dist.get_rank(group), dist.get_world_size(group), share)
        _oneccl[group] = communicator
    return communicator


def communicator_for(device: torch.device, group: Any) -> Any:
    """The communicator that tensors on `device` run over for `group`: for CPU tensors an MPI or a
    oneCCL communicator of the group's ranks (cpu_transport()), for CUDA tensors an NCCL
    communicator of the group."""
    if device.type == "cuda":
        return nccl_communicator(group, device)
    if device.type != "cpu":
        raise ValueError(f"tensors on {device}; allowed: cpu (over MPI or oneCCL) and cuda (over NCCL)")
    return oneccl_communicator(group) if cpu_transport() == "oneccl" else mpi_communicator(group)


def _cpu_transport_from_environment() -> str:
    name = os.environ.get("SPATTN_CPU_TRANSPORT", "auto")
    if name not in CPU_TRANSPORTS:
        raise ValueError(f"SPATTN_CPU_TRANSPORT={name!r}; allowed: {', '.join(CPU_TRANSPORTS)}")
    return name


def group_size(group: Any) -> int:
    """The ranks of `group`: torch.distributed's count where it is initialized, else MPI's world."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    return mpi_communicator(group).size


def raise_on_every_rank(error: Optional[Exception], communicator: Any) -> None:
    """Raises `error`, if any, so that no other rank is left waiting for this one: the C++ core
    starts every plan's creation and call with an agreement of all ranks (one small collective),
    and a rank with an error takes part in it as a refusal, so the other ranks' call raises
    spattn.SpattnError naming this rank and the error. Costs nothing when there is no error."""
    if error is None:
        return
    if communicator.size > 1:
        try:
            communicator.reject_call(f"{type(error).__name__}: {error}")
        except _core.SpattnError:
            pass  # the refusal's own echo; this rank raises its error itself
    raise error


set_cpu_transport(_cpu_transport_from_environment())
