"""Launch environments (torchrun, mpiexec), torch.distributed set-up, and what this build can run."""

from __future__ import annotations

import atexit
import json
import os
import socket
from datetime import timedelta
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core
from .communicator import mpi_world

# Backends is_available() answers for: where tensors live and what carries them.
_BACKENDS = ("cpu", "mpi", "cuda", "nccl")
# Where setup_distributed put this process's tensors.
_default_device = torch.device("cpu")


class LaunchEnvironment(NamedTuple):
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "torchrun", "mpi" or "none" (a single process)


def launch_environment() -> LaunchEnvironment:
    """Rank, world size and local rank from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK),
    Open MPI's (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK) or PMI's (PMI_RANK, PMI_SIZE, and
    MPI_LOCALRANKID of MPICH's Hydra); a single process when none are set."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return LaunchEnvironment(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), "torchrun")
    if "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        return LaunchEnvironment(int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]),
                                 int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)), "mpi")
    if "PMI_RANK" in env and "PMI_SIZE" in env:
        return LaunchEnvironment(int(env["PMI_RANK"]), int(env["PMI_SIZE"]), int(env.get("MPI_LOCALRANKID", 0)), "mpi")
    return LaunchEnvironment(0, 1, 0, "none")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _store_address(launch: LaunchEnvironment) -> Tuple[str, int]:
    """Where torch.distributed's TCP store listens: MASTER_ADDR/MASTER_PORT when set, else rank 0
    picks a free port and tells the others over MPI (loopback when all ranks share a host)."""
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if launch.launcher != "mpi":
        return "127.0.0.1", _free_port()
    mine = {"host": socket.gethostname(), "port": _free_port() if launch.rank == 0 else 0}
    everyone = [json.loads(data) for data in mpi_world().all_gather_bytes(json.dumps(mine).encode())]
    one_host = all(entry["host"] == everyone[0]["host"] for entry in everyone)
    return ("127.0.0.1" if one_host else everyone[0]["host"]), everyone[0]["port"]


def setup_distributed(backend: Optional[str] = None, timeout: Optional[timedelta] = None,
                      device: Optional[str] = None) -> Tuple[int, int, torch.device]:
    """Reads the launch environment (torchrun or mpiexec), picks the device, initializes
    torch.distributed when it is not yet, and returns (rank, world_size, device).

    device: "cuda" (GPU LOCAL_RANK, made current), "cpu", or None for CUDA where torch sees a GPU
    and this build has the CUDA path, else the CPU. The default backend is "cpu:gloo,cuda:nccl"
    for CUDA (gloo still serves CPU tensors) and gloo for the CPU.

    Under mpiexec it also checks that MPI's world is the launcher's, and exports RANK,
    WORLD_SIZE and LOCAL_RANK for code that reads torchrun's variables."""
    global _default_device
    launch = launch_environment()
    if device is None:
        device = "cuda" if torch.cuda.is_available() and is_available("cuda") else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}; allowed: 'cpu', 'cuda' or None (CUDA where available)")
    if device == "cuda":
        if not (torch.cuda.is_available() and is_available("cuda")):
            raise RuntimeError(f"device='cuda' but torch sees {torch.cuda.device_count()} GPUs and this build's "
                               f"CUDA path is {'on' if is_available('cuda') else 'off (SPATTN_CUDA=ON pip install .)'}")
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
        _default_device = torch.device("cuda", torch.cuda.current_device())
    else:
        _default_device = torch.device("cpu")
    if launch.launcher == "mpi":
        world = mpi_world()
        if (world.rank, world.size) != (launch.rank, launch.world_size):
            raise RuntimeError(f"the launcher says rank {launch.rank} of {launch.world_size} but MPI has rank "
                               f"{world.rank} of {world.size}")
        os.environ.setdefault("RANK", str(launch.rank))
        os.environ.setdefault("WORLD_SIZE", str(launch.world_size))
        os.environ.setdefault("LOCAL_RANK", str(launch.local_rank))
    if not dist.is_initialized():
        default_backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
        options: Dict[str, Any] = {"backend": backend or default_backend, "rank": launch.rank,
                                   "world_size": launch.world_size}
        if timeout is not None:
            options["timeout"] = timeout
        if launch.launcher != "torchrun":
            address, port = _store_address(launch)
            options["init_method"] = f"tcp://{address}:{port}"
        dist.init_process_group(**options)
        # The group spattn made goes at exit while Python is whole (before spattn's communicators,
        # registered earlier, so released later): a gloo group left to the interpreter's teardown
        # can end the process in std::terminate with its threads still joinable.
        atexit.register(_destroy_process_group)
    return dist.get_rank(), dist.get_world_size(), _default_device


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def default_device() -> torch.device:
    """The device setup_distributed chose (the CPU before it runs)."""
    return _default_device


def is_available(backend: str = "cpu") -> bool:
    """Whether this build's Python package runs on `backend`: "cpu" and "mpi" (CPU tensors over
    MPI), "cuda" and "nccl" (CUDA tensors over NCCL: built with SPATTN_CUDA=ON where nvcc and NCCL
    are). Says what the build has, not whether a GPU is visible (torch.cuda.is_available())."""
    if backend not in _BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(_BACKENDS)}")
    info = _core.build_info()
    if backend in ("cuda", "nccl"):
        has_cuda_kernels = any(kernels.startswith("cuda") for kernels in info["kernel_backends"])
        return has_cuda_kernels and "nccl" in info["communicators"] and hasattr(_core, "NcclCommunicator")
    return "cpu" in info["kernel_backends"] and "mpi" in info["communicators"]


def device_info() -> Dict[str, Any]:
    """What this build contains and can run here: the C++ core's build_info (version, kernel
    backends, communicators, MPI library, BLAS, devices, CPU threads and cores), the devices the
    Python package runs on, and torch's version and CUDA visibility."""
    info = dict(_core.build_info())
    info["python_backends"] = [backend for backend in _BACKENDS if is_available(backend)]
    info["torch"] = torch.__version__
    info["torch_cuda_available"] = torch.cuda.is_available()
    return info
