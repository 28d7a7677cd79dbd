"""spattn: distributed exact attention (sequence parallelism) for PyTorch.

Drop-in functions with ring-flash-attn's signatures (ring_flash_attn_func, zigzag_ring_flash_attn_func,
stripe_flash_attn_func, their kvpacked/qkvpacked forms, their varlen forms over packed sequences and
the llama3 ones with llama3_flash_attn_prepare_cu_seqlens) and the same shape for every other spattn strategy
(ulysses_attn_func, hamilton_attn_func, hamilton2_attn_func, allgather_attn_func, usp_attn_func),
the UlyssesAttention module, yunchang's set_seq_parallel_pg and LongContextAttention (USP), and
auto_select (the strategy the cost model expects to be fastest, as a function to call), and
profile() (where each call's time went, per step). CPU tensors
run over MPI (launch with mpiexec) or oneCCL (torchrun's jobs by default; set_cpu_transport());
CUDA tensors over NCCL in a SPATTN_CUDA=ON build. Call setup_distributed() first.
"""

# torch first: its CUDA libraries (cudart, cuDNN, NCCL) are then the ones the C++ core binds to
# when _core loads (same sonames), so the process holds one copy of each rather than torch's
# beside the system's.
import torch  # noqa: F401  (imported for the order, see above)

from ._core import SpattnError, SpattnTimeoutError, algorithms
from .communicator import cpu_transport, set_cpu_transport
from .distributed import device_info, is_available, launch_environment, setup_distributed
from .functional import (
    DistributedAttentionFunction,
    allgather_attn_func,
    attention_function,
    hamilton2_attn_func,
    hamilton_attn_func,
    ring_flash_attn_func,
    ring_flash_attn_kvpacked_func,
    ring_flash_attn_qkvpacked_func,
    stripe_flash_attn_func,
    stripe_flash_attn_kvpacked_func,
    stripe_flash_attn_qkvpacked_func,
    ulysses_attn_func,
    usp_attn_func,
    zigzag_ring_flash_attn_func,
    zigzag_ring_flash_attn_kvpacked_func,
    zigzag_ring_flash_attn_qkvpacked_func,
)
from .layout import SequenceLayout, sequence_layout
from .long_context import PROCESS_GROUP, LongContextAttention, set_seq_parallel_pg
from .modules import UlyssesAttention
from .plans import cached_plan_count, clear_plan_cache
from .profiling import CallProfile, SpanProfile, StepProfile, profile
from .selection import SelectedStrategy, StrategyEstimate, auto_select, estimate_strategies
from .llama3 import (
    llama3_flash_attn_prepare_cu_seqlens,
    llama3_flash_attn_varlen_func,
    llama3_flash_attn_varlen_kvpacked_func,
    llama3_flash_attn_varlen_qkvpacked_func,
)
from .varlen import (
    ring_flash_attn_varlen_func,
    ring_flash_attn_varlen_kvpacked_func,
    ring_flash_attn_varlen_qkvpacked_func,
    zigzag_ring_flash_attn_varlen_func,
    zigzag_ring_flash_attn_varlen_kvpacked_func,
    zigzag_ring_flash_attn_varlen_qkvpacked_func,
)

__version__ = _core.build_info()["version"]

__all__ = [
    "SpattnError",
    "SpattnTimeoutError",
    "algorithms",
    "cpu_transport",
    "set_cpu_transport",
    "device_info",
    "is_available",
    "launch_environment",
    "setup_distributed",
    "DistributedAttentionFunction",
    "allgather_attn_func",
    "attention_function",
    "hamilton2_attn_func",
    "hamilton_attn_func",
    "ring_flash_attn_func",
    "ring_flash_attn_kvpacked_func",
    "ring_flash_attn_qkvpacked_func",
    "stripe_flash_attn_func",
    "stripe_flash_attn_kvpacked_func",
    "stripe_flash_attn_qkvpacked_func",
    "ulysses_attn_func",
    "usp_attn_func",
    "zigzag_ring_flash_attn_func",
    "zigzag_ring_flash_attn_kvpacked_func",
    "zigzag_ring_flash_attn_qkvpacked_func",
    "llama3_flash_attn_prepare_cu_seqlens",
    "llama3_flash_attn_varlen_func",
    "llama3_flash_attn_varlen_kvpacked_func",
    "llama3_flash_attn_varlen_qkvpacked_func",
    "ring_flash_attn_varlen_func",
    "ring_flash_attn_varlen_kvpacked_func",
    "ring_flash_attn_varlen_qkvpacked_func",
    "zigzag_ring_flash_attn_varlen_func",
    "zigzag_ring_flash_attn_varlen_kvpacked_func",
    "zigzag_ring_flash_attn_varlen_qkvpacked_func",
    "SequenceLayout",
    "sequence_layout",
    "cached_plan_count",
    "CallProfile",
    "SpanProfile",
    "StepProfile",
    "profile",
    "clear_plan_cache",
    "UlyssesAttention",
    "LongContextAttention",
    "PROCESS_GROUP",
    "set_seq_parallel_pg",
    "SelectedStrategy",
    "StrategyEstimate",
    "auto_select",
    "estimate_strategies",
]
