"""spattn.profile(): the forward and backward passes made inside it, each with this rank's wall,
compute and wait times and traffic, per step as `spattn run --profile-steps` prints them and as a
timeline as `spattn run --timeline` writes it; nothing outside it."""

import torch
import torch.distributed as dist

import spattn

SEQ = 24


def zigzag_call(world_size, rank):
    layout = spattn.sequence_layout("zigzag", SEQ, 4, 2, causal=True)
    generator = torch.Generator().manual_seed(7)
    q, k, v = (layout.shard(torch.randn(1, SEQ, heads, 16, generator=generator), rank).requires_grad_()
               for heads in (4, 2, 2))
    out = spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True)
    out.sum().backward()


def test_profile_records_each_pass_with_its_steps():
    world_size, rank = dist.get_world_size(), dist.get_rank()
    with spattn.profile() as outer:
        with spattn.profile() as calls:
            zigzag_call(world_size, rank)
        zigzag_call(world_size, rank)
    assert [(call.algorithm, call.pass_name) for call in calls] == [("zigzag", "forward"), ("zigzag", "backward")]
    assert len(outer) == 4 and outer[:2] == calls  # contexts nest: the outer one saw both calls
    for call in calls:
        assert call.total_ms > 0 and call.compute_ms > 0 and call.comm_wait_ms >= 0
        assert call.compute_ms + call.comm_wait_ms <= call.total_ms * 1.01 + 0.05
        assert len(call.steps) == world_size  # zigzag: one step per rank
        assert sum(step.bytes_sent for step in call.steps) == call.bytes_sent
        assert sum(step.messages_sent for step in call.steps) == call.messages_sent
        # The timeline: in order within the call, and per step as long as its compute and waiting.
        assert call.spans and {span.kind for span in call.spans} <= {"compute", "comm_wait"}
        for before, after in zip(call.spans, call.spans[1:]):
            assert after.start_ms >= before.end_ms - 1e-3
        assert all(0 <= span.start_ms <= span.end_ms <= call.total_ms * 1.01 + 0.05 for span in call.spans)
        for index, step in enumerate(call.steps):
            spanned = sum(span.end_ms - span.start_ms for span in call.spans if span.step == index)
            assert abs(spanned - (step.compute_ms + step.comm_wait_ms)) <= 1e-6 + 1e-9 * call.total_ms
        if world_size == 1:
            assert call.bytes_sent == 0 and call.messages_sent == 0
        else:
            # K and V of this rank's 2 chunks (fp32) go round the ring: N - 1 hops forward; backward adds dK, dV.
            kv_bytes = 2 * (SEQ // world_size) * 2 * 16 * 4
            assert call.bytes_sent >= (world_size - 1) * kv_bytes


def test_nothing_is_recorded_outside_a_profile():
    world_size, rank = dist.get_world_size(), dist.get_rank()
    with spattn.profile() as calls:
        pass
    zigzag_call(world_size, rank)
    assert calls == [] and not spattn.profiling.recording()
