"""ring-flash-attn's llama3 functions over packed sequences split as one whole sequence: what
llama3_flash_attn_prepare_cu_seqlens returns, derived token by token; out, lse and the gradients of
every rank's stretch, gathered, against a per-sequence loop of an fp64 reference (the 2x criterion
against spattn's single-rank run of the same packed sequences); arguments that llama3 cannot take
are refused on every rank."""

import pytest
import torch
import torch.distributed as dist

import spattn
from attention_checks import OUTPUTS, Problem, accuracy_failures, raises_on_every_rank
from test_varlen import packed_problem, per_sequence_reference, single_rank_packed

FUNCTIONS = {
    "llama3_flash_attn_varlen_func": (spattn.llama3_flash_attn_varlen_func, "separate"),
    "llama3_flash_attn_varlen_kvpacked_func": (spattn.llama3_flash_attn_varlen_kvpacked_func, "kv"),
    "llama3_flash_attn_varlen_qkvpacked_func": (spattn.llama3_flash_attn_varlen_qkvpacked_func, "qkv"),
}


def sequence_lengths(ranks: int):
    """Packed lengths that the ranks' boundaries cut anywhere: a sequence of one token, one longer
    than half of them all (across two ranks' stretches or more), short ones; 24 tokens per rank."""
    total = 24 * ranks
    lengths = [1, 5, total // 2 + 3, 2]
    return lengths + [total - sum(lengths)]


def expected_preparation(starts, causal: bool, rank: int, ranks: int):
    """The rank's view derived token by token: the sequence of every token of its stretch."""
    per_rank = starts[-1] // ranks
    sequence_of = [index for index, (a, b) in enumerate(zip(starts, starts[1:])) for _ in range(a, b)]
    mine = sequence_of[rank * per_rank:(rank + 1) * per_rank]
    bounds_q = [0] + [t for t in range(1, per_rank) if mine[t] != mine[t - 1]] + [per_rank]
    k_begin = starts[mine[0]]
    k_end = (rank + 1) * per_rank if causal else starts[mine[-1] + 1]
    bounds_k = [starts[s] - k_begin for s in range(mine[0], mine[-1] + 1)] + [k_end - k_begin]
    return bounds_q, bounds_k, slice(k_begin, k_end)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prepare_cu_seqlens_gives_each_ranks_view(causal):
    for starts, ranks in (([0, 7, 14, 16], 8), ([0, 7, 14, 16], 2), ([0, 3, 4, 40, 41, 48], 4), ([0, 8], 4)):
        cu_seqlens = torch.tensor(starts, dtype=torch.int32)
        for rank in range(ranks):
            q_bounds, k_bounds, k_slice = expected_preparation(starts, causal, rank, ranks)
            cu_q, cu_k, max_q, max_k, local_k_slice = spattn.llama3_flash_attn_prepare_cu_seqlens(
                cu_seqlens, causal, rank, ranks)
            assert cu_q.tolist() == q_bounds and cu_k.tolist() == k_bounds, (starts, ranks, rank)
            assert cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32
            assert local_k_slice == k_slice
            assert max_q == max(b - a for a, b in zip(q_bounds, q_bounds[1:]))
            assert max_k == max(b - a for a, b in zip(k_bounds, k_bounds[1:]))


def test_prepare_refuses_what_does_not_split():
    with pytest.raises(ValueError, match=r"have 7 tokens, which do not split over 2 ranks"):
        spattn.llama3_flash_attn_prepare_cu_seqlens(torch.tensor([0, 3, 7]), True, 0, 2)
    with pytest.raises(ValueError, match=r"sequence 1 has length 0"):
        spattn.llama3_flash_attn_prepare_cu_seqlens(torch.tensor([0, 4, 4, 8]), True, 0, 2)
    with pytest.raises(TypeError, match=r"1-D integer torch.Tensor"):
        spattn.llama3_flash_attn_prepare_cu_seqlens([0, 8], True, 0, 2)
    with pytest.raises(ValueError, match=r"rank 2 is not one of the 2 ranks"):
        spattn.llama3_flash_attn_prepare_cu_seqlens(torch.tensor([0, 8]), True, 2, 2)


def run_llama3(name: str, problem: Problem, lengths, inputs, device: str):
    """`name` forward and backward on this rank's stretch on `device`; out, lse, dq, dk, dv of every
    rank gathered on the CPU."""
    func, packing = FUNCTIONS[name]
    rank, ranks = dist.get_rank(), dist.get_world_size()
    per_rank = problem.seq // ranks
    stretch = slice(rank * per_rank, (rank + 1) * per_rank)
    q, k, v, dout = (inputs[key][0, stretch].to(device) for key in ("q", "k", "v", "dout"))  # (T/N, heads, D)
    cu_seqlens = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    prepared = spattn.llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, problem.causal, rank, ranks)
    options = dict(causal=problem.causal, window_size=problem.window, softmax_scale=problem.softmax_scale,
                   return_attn_probs=True)
    heads_k_stride = 1
    if packing == "separate":
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out, lse, _ = func(*leaves, *prepared[:4], heads_k_stride, prepared[4], **options)
        grads = lambda: [leaf.grad for leaf in leaves]  # noqa: E731
    elif packing == "kv":
        q_leaf, kv = q.clone().requires_grad_(), torch.stack([k, v], dim=1).requires_grad_()
        out, lse, _ = func(q_leaf, kv, *prepared[:4], heads_k_stride, prepared[4], **options)
        grads = lambda: [q_leaf.grad, *kv.grad.unbind(1)]  # noqa: E731
    else:
        qkv = torch.stack([q, k, v], dim=1).requires_grad_()
        out, lse, _ = func(qkv, *prepared[:4], heads_k_stride, prepared[4], **options)
        grads = lambda: list(qkv.grad.unbind(1))  # noqa: E731
    assert out.shape == q.shape and lse.shape == (problem.heads, per_rank)
    out.backward(dout)
    gathered = {}
    for key, tensor in zip(OUTPUTS, [out, lse, *grads()]):
        tensor = tensor.detach().double().cpu().contiguous()
        shards = [torch.empty_like(tensor) for _ in range(ranks)]
        dist.all_gather(shards, tensor)
        gathered[key] = torch.cat(shards, dim=1 if key == "lse" else 0).unsqueeze(0)
    return gathered


def measure(name: str, dtype: torch.dtype, causal: bool, window=(-1, -1), device: str = "cpu", head_dim: int = 16):
    """`name` on `device` over this rank's stretch of packed sequences: (its results gathered, the
    single-rank baseline, the per-sequence fp64 reference, where: the case and its seed)."""
    _, packing = FUNCTIONS[name]
    lengths = sequence_lengths(dist.get_world_size())
    problem, inputs, seed = packed_problem(lengths, packing, dtype, causal, window, head_dim)
    where = f"{name} {problem} sequences {lengths} at {dist.get_world_size()} ranks on {device}, seed {seed}"
    return (run_llama3(name, problem, lengths, inputs, device), single_rank_packed(problem, lengths, inputs, device),
            per_sequence_reference(problem, lengths, inputs), where)


def check(name: str, dtype: torch.dtype, causal: bool, window=(-1, -1)):
    results, single, expected, where = measure(name, dtype, causal, window)
    failures = accuracy_failures(results, single, expected)
    assert not failures, f"{where}: {failures}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_llama3_matches_a_per_sequence_reference(name, causal, dtype):
    check(name, dtype, causal)


def test_llama3_with_a_sliding_window():
    check("llama3_flash_attn_varlen_func", torch.float32, causal=True, window=(3, 0))


def test_arguments_llama3_cannot_take_are_refused_on_every_rank():
    ranks, rank = dist.get_world_size(), dist.get_rank()
    q = torch.randn(8, 2, 16)
    prepared = spattn.llama3_flash_attn_prepare_cu_seqlens(torch.tensor([0, 3, 8 * ranks]), True, rank, ranks)
    # Rank 0 passes cu_seqlens_q that it never prepared: every rank refuses the call.
    cu_seqlens_q = torch.tensor([0, 8]) if rank == 0 else prepared[0]
    with raises_on_every_rank(0, r"cu_seqlens_q, cu_seqlens_k and local_k_slice are not values that "
                                 r"llama3_flash_attn_prepare_cu_seqlens returned"):
        spattn.llama3_flash_attn_varlen_func(q, q, q, cu_seqlens_q, prepared[1], 8, 8, 1, prepared[4], causal=True)
    with pytest.raises(ValueError, match=r"heads_k_stride 3 must be a positive divisor of the 2 kv heads"):
        spattn.llama3_flash_attn_varlen_func(q, q, q, *prepared[:4], 3, prepared[4], causal=True)
    with pytest.raises(ValueError, match=r"q holds 4 tokens; the prepared sequences have"):
        spattn.llama3_flash_attn_varlen_func(q[:4], q[:4], q[:4], *prepared[:4], 1, prepared[4], causal=True)
