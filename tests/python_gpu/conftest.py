"""pytest set-up for the Python package on GPUs: one process per GPU, launched with
    torchrun --nproc-per-node N -m pytest tests/python_gpu
on a machine with the CUDA build (SPATTN_CUDA=ON pip install .). scripts/device-run.sh runs it
(stage python-gpu) at 1 GPU and at every GPU of the machine."""

import os
import sys

import pytest

import spattn

# The accuracy helpers (fp64 reference, criterion) are the CPU tests'.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))


@pytest.fixture(scope="session", autouse=True)
def world():
    """(rank, world_size, device) after spattn.setup_distributed(device="cuda")."""
    return spattn.setup_distributed(device="cuda")
