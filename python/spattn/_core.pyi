"""Type stubs of spattn._core, the nanobind extension over spattn's C++ core.

Tensor arguments are any DLPack-exporting CPU tensors (torch.Tensor, numpy arrays, ...) that are
contiguous, of 1 to 4 dimensions, in float32, float16 or bfloat16.
"""

from typing import Any, Dict, List, Optional, Tuple

Tensor = Any  # a DLPack-exporting tensor

class SpattnError(RuntimeError):
    """Every error of spattn's C++ core; the message names the bad value and what is allowed."""

def algorithms() -> List[str]: ...
def build_info() -> Dict[str, Any]: ...
def set_cpu_threads(threads: int) -> None: ...
def cpu_threads() -> int: ...
def cluster_presets() -> List[str]: ...
def estimate_strategies(
    cluster: str,
    ranks: int,
    batch: int,
    seq: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    causal: bool,
) -> List[Tuple[str, str, float, float, str]]:
    """(algorithm, configuration, forward s, forward+backward s, why not) per algorithm, the
    applicable ones first, fastest first."""

class MpiCommunicator:
    """spattn's communicator over MPI_COMM_WORLD (initializes MPI when nobody has)."""

    def __init__(self) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    def barrier(self) -> None: ...
    def all_gather_bytes(self, data: bytes) -> List[bytes]: ...

class Plan:
    """A DistributedAttention plan for one global shape, dtype, mask and algorithm (collective)."""

    def __init__(
        self,
        communicator: MpiCommunicator,
        algorithm: str,
        batch: int,
        seq: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        dtype: str,
        causal: bool = False,
        window_left: int = -1,
        window_right: int = -1,
        softmax_scale: Optional[float] = None,
        nodes: int = 1,
        inner: int = 0,
        across: str = "zigzag",
    ) -> None: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def layout_name(self) -> str: ...
    @property
    def global_length(self) -> int: ...
    @property
    def local_length(self) -> int: ...
    @property
    def ranks(self) -> int: ...
    def chunks(self, rank: int) -> List[Tuple[int, int, int]]: ...
    def forward(self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor) -> None: ...
    def backward(
        self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dout: Tensor, dq: Tensor, dk: Tensor, dv: Tensor
    ) -> None: ...

def local_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softmax_scale: Optional[float] = None,
) -> None: ...
def local_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    dq: Tensor,
    dk: Tensor,
    dv: Tensor,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    softmax_scale: Optional[float] = None,
) -> None: ...
