"""spattn.profile(): where the time of the spattn calls made inside it went, as `spattn run` prints it.

    with spattn.profile() as calls:
        out = spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True)
        out.sum().backward()            # inside: the backward pass is recorded too
    for call in calls:
        print(call.algorithm, call.pass_name, call.total_ms, call.compute_ms, call.comm_wait_ms)

Each entry is this rank's: its wall time of the call, the time its block kernels and merges took,
the time the device stood waiting for transfers (the exposed transfer time), what it sent, the same
per strategy step, and the call's timeline (`spans`: each compute section and wait, as
`spattn run --timeline` writes them). The times come from events on the device's stream; a profiled
call waits for its device work at its start and end only, so profiling costs the overlap of one call
with the next, not the overlap inside it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, NamedTuple, Optional


class StepProfile(NamedTuple):
    """One strategy step of a call."""
    compute_ms: float
    comm_wait_ms: float
    bytes_sent: float
    messages_sent: int


class SpanProfile(NamedTuple):
    """One stretch of a call's timeline: a compute section or a wait for transfers."""
    step: int
    kind: str  # "compute" or "comm_wait"
    start_ms: float  # since the call began, on the device's clock
    end_ms: float


class CallProfile(NamedTuple):
    """One pass ("forward" or "backward") of one call, on this rank."""
    algorithm: str
    pass_name: str
    total_ms: float
    compute_ms: float
    comm_wait_ms: float
    bytes_sent: float
    messages_sent: int
    steps: List[StepProfile]
    spans: List[SpanProfile]


# The lists of the open profile() contexts, innermost last: a call is recorded in each.
_recordings: List[List[CallProfile]] = []


@contextlib.contextmanager
def profile() -> Iterator[List[CallProfile]]:
    """Records every spattn call (forward and backward passes) made until the block ends, in the
    list it yields. Contexts nest; each records the calls made inside it."""
    calls: List[CallProfile] = []
    _recordings.append(calls)
    try:
        yield calls
    finally:
        # By identity: lists with the same calls compare equal.
        del _recordings[next(index for index, open_calls in enumerate(_recordings) if open_calls is calls)]


def recording() -> bool:
    """Whether a call made now is to be profiled."""
    return bool(_recordings)


def record(algorithm: str, pass_name: str, timing: Optional[Dict[str, Any]]) -> None:
    """Adds a pass's timing (the dict that Plan.forward or Plan.backward returns) to every open context."""
    if timing is None:
        return
    steps = [StepProfile(step["compute_ms"], step["comm_wait_ms"], step["bytes_sent"], step["messages_sent"])
             for step in timing["steps"]]
    spans = [SpanProfile(span["step"], span["kind"], span["start_ms"], span["end_ms"]) for span in timing["spans"]]
    call = CallProfile(algorithm, pass_name, timing["total_ms"], timing["compute_ms"], timing["comm_wait_ms"],
                       timing["bytes_sent"], timing["messages_sent"], steps, spans)
    for calls in _recordings:
        calls.append(call)
