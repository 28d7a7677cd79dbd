"""pytest set-up for spattn's Python tests. Run under mpiexec at any rank count, e.g.
    mpiexec --oversubscribe -n 3 python3 -m pytest tests/python
(or tests/python/run-under-mpi.sh 1 2 3). Every rank runs every test; verdicts are computed from
gathered results, so they are the same on every rank.
"""

import pytest

import spattn


@pytest.fixture(scope="session", autouse=True)
def world():
    """(rank, world_size, device) after spattn.setup_distributed()."""
    return spattn.setup_distributed()
