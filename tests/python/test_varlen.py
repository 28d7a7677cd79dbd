"""ring-flash-attn's varlen functions over packed sequences: out, lse and the gradients of every
rank's parts, gathered, against a per-sequence loop of an fp64 reference (the 2x criterion against
spattn's single-rank run of the same packed sequences); arguments that do not describe packed
sequences are refused on every rank."""

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import _core
from attention_checks import OUTPUTS, Problem, accuracy_failures, fresh_seed, reference

FUNCTIONS = {
    "ring_flash_attn_varlen_func": (spattn.ring_flash_attn_varlen_func, "ring", "separate"),
    "ring_flash_attn_varlen_kvpacked_func": (spattn.ring_flash_attn_varlen_kvpacked_func, "ring", "kv"),
    "ring_flash_attn_varlen_qkvpacked_func": (spattn.ring_flash_attn_varlen_qkvpacked_func, "ring", "qkv"),
    "zigzag_ring_flash_attn_varlen_func": (spattn.zigzag_ring_flash_attn_varlen_func, "zigzag", "separate"),
    "zigzag_ring_flash_attn_varlen_kvpacked_func": (spattn.zigzag_ring_flash_attn_varlen_kvpacked_func, "zigzag", "kv"),
    "zigzag_ring_flash_attn_varlen_qkvpacked_func": (spattn.zigzag_ring_flash_attn_varlen_qkvpacked_func, "zigzag",
                                                     "qkv"),
}

# Local lengths of the packed sequences on every rank (zigzag's are even): a sequence of one
# token per rank, one longer than the others together, several short ones.
LOCAL_LENGTHS = {"ring": [1, 9, 2, 3], "zigzag": [2, 12, 2, 4]}


def parts_of(algorithm: str, length: int, rank: int, ranks: int):
    """The [begin, end) ranges of a sequence of `length` that `rank` holds, in order."""
    if algorithm == "ring":
        part = length // ranks
        return [(rank * part, (rank + 1) * part)]
    part = length // (2 * ranks)
    return [(rank * part, (rank + 1) * part), ((2 * ranks - 1 - rank) * part, (2 * ranks - rank) * part)]


def local_indices(algorithm: str, lengths, rank: int, ranks: int) -> torch.Tensor:
    """The packed global positions of `rank`'s tokens, in its local order."""
    indices, start = [], 0
    for length in lengths:
        for begin, end in parts_of(algorithm, length, rank, ranks):
            indices.extend(range(start + begin, start + end))
        start += length
    return torch.tensor(indices)


def per_sequence_reference(problem: Problem, lengths, inputs):
    """The fp64 reference of every sequence on its own, packed back: out, dq (1, T, H, D), lse (1, H, T)."""
    results = {name: [] for name in OUTPUTS}
    start = 0
    for length in lengths:
        part = {name: tensor[:, start:start + length] for name, tensor in inputs.items()}
        alone = reference(Problem(1, length, problem.heads, problem.kv_heads, problem.head_dim, problem.dtype,
                                  problem.causal, problem.window, problem.softmax_scale), part)
        for name in OUTPUTS:
            results[name].append(alone[name])
        start += length
    return {name: torch.cat(parts, dim=2 if name == "lse" else 1) for name, parts in results.items()}


def single_rank_packed(problem: Problem, lengths, inputs, device: str):
    """spattn's kernels on the whole packed sequence in this process, on `device`: the same-dtype
    baseline, back on the CPU."""
    q, k, v, dout = (inputs[name].to(device) for name in ("q", "k", "v", "dout"))
    options = dict(causal=problem.causal, window_left=problem.window[0], window_right=problem.window[1],
                   softmax_scale=problem.softmax_scale, document_lengths=list(lengths))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((1, problem.heads, problem.seq), float("nan"), device=device)
    dq, dk, dv = (torch.full_like(x, float("nan")) for x in (q, k, v))
    if q.is_cuda:
        torch.cuda.synchronize()  # the local functions run on a stream of their own
    _core.local_forward(q, k, v, out, lse, **options)
    _core.local_backward(q, k, v, out, lse, dout, dq, dk, dv, **options)
    return {name: tensor.cpu() for name, tensor in zip(OUTPUTS, (out, lse, dq, dk, dv))}


def run_varlen(name: str, problem: Problem, local_lengths, inputs, device: str):
    """`name` forward and backward on this rank's parts on `device`; out, lse, dq, dk, dv gathered
    into the packed order on the CPU."""
    func, algorithm, packing = FUNCTIONS[name]
    rank, ranks = dist.get_rank(), dist.get_world_size()
    lengths = [length * ranks for length in local_lengths]
    index = local_indices(algorithm, lengths, rank, ranks)
    q, k, v, dout = (inputs[key][0, index].to(device) for key in ("q", "k", "v", "dout"))  # (T_local, heads, D)
    cu_seqlens = torch.tensor([0] + local_lengths, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    options = dict(causal=problem.causal, window_size=problem.window, softmax_scale=problem.softmax_scale,
                   return_attn_probs=True)
    if packing == "separate":
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out, lse, _ = func(*leaves, cu_seqlens, max(local_lengths), **options)
        grads = lambda: [leaf.grad for leaf in leaves]  # noqa: E731
    elif packing == "kv":
        q_leaf, kv = q.clone().requires_grad_(), torch.stack([k, v], dim=1).requires_grad_()
        out, lse, _ = func(q_leaf, kv, cu_seqlens, max(local_lengths), **options)
        grads = lambda: [q_leaf.grad, *kv.grad.unbind(1)]  # noqa: E731
    else:
        qkv = torch.stack([q, k, v], dim=1).requires_grad_()
        out, lse, _ = func(qkv, cu_seqlens, max(local_lengths), **options)
        grads = lambda: list(qkv.grad.unbind(1))  # noqa: E731
    assert out.shape == q.shape and lse.shape == (problem.heads, q.shape[0])
    out.backward(dout)
    local = dict(zip(OUTPUTS, [out, lse, *grads()]))
    gathered = {}
    for key, tensor in local.items():
        tensor = tensor.detach().double().cpu().contiguous()
        shards = [torch.empty_like(tensor) for _ in range(ranks)]
        dist.all_gather(shards, tensor)
        full = torch.empty((problem.heads, problem.seq) if key == "lse" else (problem.seq, *tensor.shape[1:]),
                           dtype=torch.float64)
        for source, shard in enumerate(shards):
            positions = local_indices(algorithm, lengths, source, ranks)
            if key == "lse":
                full[:, positions] = shard
            else:
                full[positions] = shard
        gathered[key] = full.unsqueeze(0)
    return gathered


def packed_problem(lengths, packing: str, dtype: torch.dtype, causal: bool, window, head_dim: int):
    """(problem, inputs, seed): fresh random q, k, v, dout (1, T, heads, D) of packed sequences of
    `lengths`; qkv packing takes as many kv heads as heads."""
    heads, kv_heads = (2, 2) if packing == "qkv" else (4, 2)
    problem = Problem(batch=1, seq=sum(lengths), heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype,
                      causal=causal, window=window)
    seed = fresh_seed()
    generator = torch.Generator().manual_seed(seed)
    shapes = {"q": (1, problem.seq, heads, head_dim), "k": (1, problem.seq, kv_heads, head_dim),
              "v": (1, problem.seq, kv_heads, head_dim), "dout": (1, problem.seq, heads, head_dim)}
    return problem, {key: torch.randn(shape, generator=generator).to(dtype) for key, shape in shapes.items()}, seed


def measure(name: str, dtype: torch.dtype, causal: bool, window=(-1, -1), device: str = "cpu", head_dim: int = 16):
    """`name` on `device` over this rank's parts of packed sequences: (its results gathered, the
    single-rank baseline, the per-sequence fp64 reference, where: the case and its seed)."""
    _, algorithm, packing = FUNCTIONS[name]
    local_lengths = LOCAL_LENGTHS[algorithm]
    lengths = [length * dist.get_world_size() for length in local_lengths]
    problem, inputs, seed = packed_problem(lengths, packing, dtype, causal, window, head_dim)
    where = f"{name} {problem} sequences {lengths} at {dist.get_world_size()} ranks on {device}, seed {seed}"
    return (run_varlen(name, problem, local_lengths, inputs, device),
            single_rank_packed(problem, lengths, inputs, device), per_sequence_reference(problem, lengths, inputs),
            where)


def check(name: str, dtype: torch.dtype, causal: bool, window=(-1, -1)):
    results, single, expected, where = measure(name, dtype, causal, window)
    failures = accuracy_failures(results, single, expected)
    assert not failures, f"{where}: {failures}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_varlen_matches_a_per_sequence_reference(name, causal, dtype):
    check(name, dtype, causal)


@pytest.mark.parametrize("name", ["ring_flash_attn_varlen_func", "zigzag_ring_flash_attn_varlen_func"])
def test_varlen_with_a_sliding_window(name):
    check(name, torch.float32, causal=True, window=(3, 0))


def test_bad_cu_seqlens_are_refused_on_every_rank():
    q = torch.randn(8, 2, 16)
    for cu_seqlens, message in (
        (torch.tensor([0, 3, 7], dtype=torch.int32), r"must start at 0 and end at T_local = 8"),
        (torch.tensor([1, 8], dtype=torch.int32), r"must start at 0"),
        (torch.tensor([0, 4, 4, 8], dtype=torch.int32), r"sequence 1 has local length 0"),
        (torch.tensor([0.0, 8.0]), r"cu_seqlens must be a 1-D integer torch.Tensor"),
    ):
        with pytest.raises((ValueError, TypeError), match=message):
            spattn.ring_flash_attn_varlen_func(q, q, q, cu_seqlens, 8)
    with pytest.raises(ValueError, match="zigzag holds two equal parts of every sequence"):
        spattn.zigzag_ring_flash_attn_varlen_func(q, q, q, torch.tensor([0, 3, 8], dtype=torch.int32), 5)
    with pytest.raises(ValueError, match=r"expected 3 dimensions \(T_local, H, D\)"):
        spattn.ring_flash_attn_varlen_func(q[None], q[None], q[None], torch.tensor([0, 8]), 8)
    with pytest.raises(ValueError, match=r"kv has shape \(8, 2, 16\); expected \(T_local, 2, heads, D\)"):
        spattn.ring_flash_attn_varlen_kvpacked_func(q, q, torch.tensor([0, 8]), 8)


def test_new_packings_keep_only_the_last_few_plans():
    spattn.clear_plan_cache()
    q = torch.randn(8, 2, 16)
    for first in range(1, 8):
        spattn.ring_flash_attn_varlen_func(q, q, q, torch.tensor([0, first, 8], dtype=torch.int32), 8)
    assert spattn.cached_plan_count() == spattn.plans.DOCUMENT_PLANS_KEPT


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_per_sequence_reference_is_a_loop_of_torch_sdpa(causal):
    # The reference every varlen and llama3 test holds spattn to, against PyTorch's own attention
    # run on each sequence alone (fp64, GQA through repeated kv heads).
    lengths = [1, 7, 30, 2]
    problem, inputs, _ = packed_problem(lengths, "separate", torch.float32, causal, (-1, -1), head_dim=16)
    expected = per_sequence_reference(problem, lengths, inputs)
    group_size = problem.heads // problem.kv_heads
    start = 0
    for length in lengths:
        q, k, v = (inputs[name][:, start:start + length].double().transpose(1, 2) for name in ("q", "k", "v"))
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(group_size, dim=1), v.repeat_interleave(group_size, dim=1), is_causal=causal,
            scale=problem.scale)  # (1, H, length, D)
        torch.testing.assert_close(expected["out"][:, start:start + length], out.transpose(1, 2))
        start += length
