"""A job that torchrun starts without MPI (oneccl_torchrun_job.py at 2 and 3 ranks): CPU tensors run
over oneCCL by default and zigzag matches PyTorch's attention on the whole sequence. Runs once, from
the 1-rank pytest run (a job of its own per rank count); skipped without torchrun or oneCCL."""

import os
import shutil
import subprocess
import sys

import pytest
import torch.distributed as dist

from spattn import communicator

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oneccl_torchrun_job.py")


@pytest.mark.parametrize("ranks", [2, 3])
def test_torchrun_job_runs_over_oneccl(ranks):
    if dist.get_world_size() != 1:
        pytest.skip("started once, from the 1-rank run")
    if not communicator.oneccl_built() or shutil.which("torchrun") is None:
        pytest.skip("needs oneCCL in this build and torchrun")
    # The variables of the mpiexec that runs pytest would make the job's ranks think they are MPI's.
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("OMPI_", "PMI", "PMIX", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                           "MASTER_", "SPATTN_CPU_TRANSPORT"))}
    environment.update(OMP_NUM_THREADS="1", CCL_YIELD="sched_yield", FI_PROVIDER="shm", CCL_ATL_SHM="1")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                             str(ranks), JOB], capture_output=True, text=True, env=environment, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok") == ranks, result.stdout + result.stderr
