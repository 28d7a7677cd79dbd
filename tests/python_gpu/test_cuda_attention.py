"""The wrappers on CUDA tensors over NCCL: every strategy's out, lse and gradients against the
fp64 reference next to one GPU running the whole sequence (cuDNN), on torch's current stream,
over any process group, under torch.compile, packed sequences (the varlen and llama3 functions), and a bad
argument on one rank failing every rank."""

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import (Problem, accuracy_failures, distributed, fresh_seed, full_inputs, max_error,
                              raises_on_every_rank, reference, single_rank)
from test_llama3 import measure as measure_llama3
from test_varlen import measure as measure_varlen

SEQ = 48  # splits for every strategy at 1 and 2 ranks (hamilton: S % 2N(N-1))
FUNCTIONS = ["ring", "zigzag", "stripe", "ulysses", "hamilton", "allgather", "usp"]
# cuDNN rounds each call's partial out, dq, dk, dv to the input dtype before spattn sums them in
# fp32; where a row's keys (or a key's queries) span several calls, that can take the error just
# past 2x the one-GPU run's (issue 4). Within this bound the case is reported as a known failure;
# past it (a wrong layout, a missed stream dependency: errors of order 1) it fails.
KNOWN_BF16_PARTIALS_BOUND = 4.0


def judge(results, single, expected, where: str):
    """Passes within the 2x rule, reports a known failure within KNOWN_BF16_PARTIALS_BOUND, fails past it."""
    failures = accuracy_failures(results, single, expected)
    for name in failures:
        error, baseline = max_error(results[name], expected[name]), max_error(single[name], expected[name])
        assert error <= KNOWN_BF16_PARTIALS_BOUND * baseline, f"{where}: {name} {failures[name]}"
    if failures:
        pytest.xfail(f"issue 4, cuDNN's rounded partials: {where}: {failures}")


def check(algorithm: str, dtype: torch.dtype, causal: bool, group=None):
    heads = 2 * dist.get_world_size()
    problem = Problem(batch=1, seq=SEQ, heads=heads, kv_heads=heads // 2, head_dim=64, dtype=dtype, causal=causal)
    seed = fresh_seed()
    inputs = full_inputs(problem, seed)
    layout = spattn.sequence_layout(algorithm, SEQ, problem.heads, problem.kv_heads, causal=causal, group=group)
    results = distributed(spattn.attention_function(algorithm), "separate", layout, problem, inputs,
                          device="cuda", group=group)
    judge(results, single_rank(problem, inputs, device="cuda"), reference(problem, inputs),
          f"{algorithm} {problem} at {dist.get_world_size()} GPUs, seed {seed}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("algorithm", FUNCTIONS)
def test_every_strategy_matches_reference_in_bf16(algorithm, causal):
    check(algorithm, torch.bfloat16, causal)


def test_fp16_zigzag_matches_reference():
    check("zigzag", torch.float16, causal=True)


def test_a_group_of_its_own_gets_its_own_communicator():
    group = dist.new_group(list(range(dist.get_world_size())))
    check("zigzag", torch.bfloat16, causal=True, group=group)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", ["ring_flash_attn_varlen_func", "zigzag_ring_flash_attn_varlen_func"])
def test_varlen_packed_sequences_match_a_per_sequence_reference(name, causal):
    # Sequences of one token per rank among longer ones: the one-query, one-key pieces cuDNN's
    # backward refuses by itself.
    judge(*measure_varlen(name, torch.bfloat16, causal, device="cuda", head_dim=64))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", ["llama3_flash_attn_varlen_func", "llama3_flash_attn_varlen_qkvpacked_func"])
def test_llama3_packed_sequences_match_a_per_sequence_reference(name, causal):
    # Llama 3's split: each GPU a contiguous stretch, sequences cut wherever the stretches end (one of
    # one token, one longer than half of them all), all-gather of the keys and values.
    judge(*measure_llama3(name, torch.bfloat16, causal, device="cuda", head_dim=64))


def test_calls_follow_torchs_current_stream():
    # The same call on the default stream and on a side stream, with the inputs made on the side
    # stream just before: identical results only if the plan's compute waits for them there.
    torch.manual_seed(7)
    heads = 2 * dist.get_world_size()
    q, k, v = (torch.randn(1, SEQ // dist.get_world_size(), h, 64, device="cuda", dtype=torch.bfloat16)
               for h in (heads, heads // 2, heads // 2))
    expected = spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        q2, k2, v2 = (x * 1 for x in (q, k, v))  # produced on the side stream
        out = spattn.zigzag_ring_flash_attn_func(q2, k2, v2, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(out, expected)


def test_torch_compile_over_a_wrapper():
    torch.manual_seed(11)
    heads = 2 * dist.get_world_size()
    q, k, v = (torch.randn(1, SEQ // dist.get_world_size(), h, 64, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for h in (heads, heads // 2, heads // 2))
    dout = torch.randn(1, SEQ // dist.get_world_size(), heads, 64, device="cuda", dtype=torch.bfloat16)

    def attention(q, k, v):
        return spattn.zigzag_ring_flash_attn_func(q * 2, k, v, causal=True)

    eager = attention(q, k, v)
    eager_grads = torch.autograd.grad(eager, (q, k, v), dout)
    compiled = torch.compile(attention)(q, k, v)  # a graph break at the autograd.Function is fine
    compiled_grads = torch.autograd.grad(compiled, (q, k, v), dout)
    assert torch.equal(compiled, eager)
    for got, want in zip(compiled_grads, eager_grads):
        assert torch.equal(got, want)


@pytest.mark.parametrize("new_group", [False, True], ids=["world", "new-group"])
def test_a_bad_argument_on_one_rank_fails_every_rank(new_group):
    # dropout on the last rank only: it refuses in the agreement that starts the other ranks' call,
    # so they raise too instead of waiting for it in the call's collectives.
    group = dist.new_group(list(range(dist.get_world_size()))) if new_group else None
    heads = 2 * dist.get_world_size()
    q, k, v = (torch.randn(1, 8, heads, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    last = dist.get_world_size() - 1
    dropout = 0.1 if dist.get_rank() == last else 0.0
    with raises_on_every_rank(last, "dropout_p=0.1 is not supported"):
        spattn.zigzag_ring_flash_attn_func(q, k, v, dropout_p=dropout, causal=True, group=group)
    out = spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True, group=group)  # the next call runs
    assert torch.isfinite(out).all()
