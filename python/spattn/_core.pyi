"""Type stubs of spattn._core, the nanobind extension over spattn's C++ core.

Tensor arguments are any DLPack-exporting CPU or CUDA tensors (torch.Tensor, numpy arrays, ...)
that are contiguous, of 1 to 4 dimensions, in float32, float16 or bfloat16. make_nccl_unique_id and
NcclCommunicator exist only in builds with the CUDA path (SPATTN_CUDA=ON pip install .),
OnecclCommunicator only where oneCCL was found (scripts/install-dependencies.sh installs it).
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Tensor = Any  # a DLPack-exporting tensor

class SpattnError(RuntimeError):
    """Every error of spattn's C++ core; the message names the bad value and what is allowed."""

class SpattnTimeoutError(SpattnError):
    """A rank that gave up waiting for its peers (a peer died, stalled or is not in the call, for
    longer than SPATTN_TIMEOUT seconds): this rank's own error, raised on each rank that gave up
    rather than agreed on by all of them."""

def algorithms() -> List[str]: ...
def build_info() -> Dict[str, Any]: ...
def parse_kernel_choice(name: str) -> str:
    """`name` when it names a choice of block kernels (auto, own or cudnn); SpattnError naming the
    allowed names otherwise."""
def without_error_prefix(message: str) -> str:
    """`message` without the 'spattn: ' that every SpattnError starts with, for quoting it in
    another error."""
def window_error(left: int, right: int) -> str:
    """'' when (left, right) is a sliding window spattn takes (each side >= 0, or -1 for
    unbounded); otherwise why not."""
def set_cpu_threads(threads: int) -> None: ...
def cpu_threads() -> int: ...
def cluster_presets() -> List[str]: ...
def cluster_nodes(cluster: str, ranks: int) -> int:
    """The nodes `ranks` fill, in nodes of the preset's size (what estimate_strategies assumes when
    not told)."""
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
    nodes: int = 0,
) -> List[Tuple[str, str, float, float, str]]:
    """(algorithm, configuration, forward s, forward+backward s, why not) per algorithm, the
    applicable ones first, fastest first; nodes: how many the ranks spread over (0: nodes of the
    preset's size)."""

def hamiltonian_decomposition(ranks: int) -> List[List[int]]:
    """The n-1 arc-disjoint directed Hamiltonian cycles of the complete directed graph on n ranks that
    the hamilton algorithm rotates slots along (each cycle lists the ranks in travel order; the last
    sends to the first); SpattnError saying why for n with none (4 and 6)."""
def hamiltonian_decomposition_error(ranks: int) -> str:
    """Why hamiltonian_decomposition(ranks) has no answer, or "" when it has one."""
def two_level_cycles(ranks_per_node: int, nodes: int) -> List[List[int]]:
    """The m cycles of hamilton2 over nodes of m consecutive ranks: cycle i runs the zig-zag path i of
    the node through node 0, then node 1, ..., and back; SpattnError saying why when the scheme does
    not exist."""
def two_level_error(ranks_per_node: int, nodes: int) -> str:
    """Why two_level_cycles(ranks_per_node, nodes) has no answer, or "" when it has one."""

class Communicator:
    """A group of ranks that spattn's plans transfer over."""

    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def device(self) -> str: ...
    def reject_call(self, error: str) -> None:
        """This rank's part in the agreement that starts every plan's creation and call on the other
        ranks, as a refusal: their calls raise SpattnError naming this rank and `error`, instead of
        waiting for it; this one raises SpattnError with `error`."""

class MpiCommunicator(Communicator):
    """spattn's communicator over MPI_COMM_WORLD (initializes MPI when nobody has), or over some of
    its ranks (over_ranks)."""

    def __init__(self) -> None: ...
    def barrier(self) -> None: ...
    def over_ranks(self, ranks: Sequence[int]) -> MpiCommunicator:
        """A communicator over these ranks of this one (rank i of it is ranks[i]), collective over
        them only: every listed rank calls it with the same list, the others need not."""
    def all_gather_bytes(self, data: bytes) -> List[bytes]: ...

def launched_by_environment() -> bool:
    """Whether this process was started without an MPI launcher but with WORLD_SIZE set (torchrun, a
    shell loop): CPU tensors then run over oneCCL by default."""

class OnecclCommunicator(Communicator):
    """spattn's communicator over oneCCL, for CPU tensors (where this build has oneCCL)."""

    def __init__(self, rank: int, size: int, share: Callable[[bytes], bytes]) -> None:
        """Rank `rank` of `size` processes (collective): share(address) is given this rank's
        key-value store address and returns rank 0's, e.g. by torch.distributed.broadcast_object_list."""

def make_nccl_unique_id() -> bytes:
    """A fresh NCCL unique id: one rank makes it, every rank of the new communicator passes it."""

class NcclCommunicator(Communicator):
    """spattn's communicator over NCCL, one GPU per rank."""

    def __init__(self, rank: int, size: int, unique_id: bytes, device_index: int) -> None: ...

class Plan:
    """A DistributedAttention plan for one global shape, dtype, mask, algorithm and choice of block
    kernels (collective)."""

    def __init__(
        self,
        communicator: Communicator,
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
        kernel: str = "auto",
        document_lengths: Sequence[int] = ...,
        document_split: str = "per_document",
        deterministic: bool = False,
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
    @property
    def position_stride(self) -> int: ...
    def chunks(self, rank: int) -> List[Tuple[int, int, int]]: ...
    def set_stream(self, stream: int) -> None: ...
    def synchronize(self) -> None: ...
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, profile: bool = False
    ) -> Optional[Dict[str, Any]]: ...
    def backward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        out: Tensor,
        lse: Tensor,
        dout: Tensor,
        dq: Tensor,
        dk: Tensor,
        dv: Tensor,
        profile: bool = False,
    ) -> Optional[Dict[str, Any]]: ...

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
    kernel: str = "auto",
    document_lengths: Sequence[int] = ...,
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
    kernel: str = "auto",
    document_lengths: Sequence[int] = ...,
    deterministic: bool = False,
) -> None: ...
