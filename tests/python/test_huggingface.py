"""Tiny randomly initialized Llama and Mistral (sliding window) models on spattn through
spattn.huggingface: the loss, each token's loss and every parameter's gradient of the distributed
model (each rank feeds its shard of the sequence with global position_ids) against the fp64 model
on the whole sequence with eager attention, by the project's criterion: distributed error <= 2 x
the error of the fp32 single-process model + a tiny floor; packed sequences
(update_ring_flash_attn_params, each rank feeding its contiguous stretch) against each sequence run
on its own. Also the arguments the substitute cannot take raise an error on every rank (ValueError
where they are, spattn.SpattnError elsewhere)."""

import copy
import math
from typing import Dict

import pytest
import torch
import torch.distributed as dist
# Not skipped when missing: scripts/install-dependencies.sh installs transformers for CI.
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

import spattn
from attention_checks import RELATIVE_FLOOR, fresh_seed, max_error, raises_on_every_rank
from spattn.huggingface import substitute_hf_flash_attn

# 24 tokens split at 1, 2 and 3 ranks for every strategy (hamilton: S % 2N(N-1), zigzag: S % 2N).
BATCH, SEQ, VOCAB = 2, 24, 128
IGNORE = -100  # cross_entropy's ignore_index: the last token has no next token to predict


# Llama: causal with GQA; Mistral: the same with a sliding window (transformers passes sliding_window).
ARCHITECTURES = {"llama": (LlamaConfig, LlamaForCausalLM, {}),
                 "mistral": (MistralConfig, MistralForCausalLM, {"sliding_window": 5})}


def tiny_model(seed: int, attn_implementation: str, architecture: str = "llama", attention_dropout: float = 0.0):
    """Random weights, the same on every rank for the same seed. GQA 6:2; 6 heads split over 1, 2 and
    3 ranks, as Ulysses splits them."""
    config_class, model_class, architecture_options = ARCHITECTURES[architecture]
    config = config_class(vocab_size=VOCAB, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=6, num_key_value_heads=2, head_dim=16, max_position_embeddings=SEQ,
                          attention_dropout=attention_dropout, **architecture_options)
    torch.manual_seed(seed)
    model = model_class(config)
    model.set_attn_implementation(attn_implementation)
    return model


def next_token_targets(input_ids: torch.Tensor) -> torch.Tensor:
    """(B, S): token t predicts token t+1 of the whole sequence, so each rank's targets are a shard too."""
    return torch.cat([input_ids[:, 1:], torch.full_like(input_ids[:, :1], IGNORE)], dim=1)


def token_losses(model: torch.nn.Module, input_ids: torch.Tensor, targets: torch.Tensor,
                 position_ids: torch.Tensor) -> torch.Tensor:
    """(B, S): each token's cross-entropy loss (0 where the target is IGNORE)."""
    logits = model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits  # (B, S, V)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none",
                                             ignore_index=IGNORE).view(targets.shape)


def whole_sequence_results(model: torch.nn.Module, input_ids: torch.Tensor,
                           device: str = "cpu") -> Dict[str, torch.Tensor]:
    """Loss (mean over predicted tokens), each token's loss and the parameter gradients of one
    process on the whole sequence (the model is on `device`; on CUDA it runs under bf16 autocast, as
    mixed-precision training does)."""
    targets = next_token_targets(input_ids).to(device)
    with torch.autocast("cuda", torch.bfloat16, enabled=device == "cuda"):
        losses = token_losses(model, input_ids.to(device), targets, torch.arange(SEQ, device=device)[None])
    loss = losses.sum() / (targets != IGNORE).sum()
    loss.backward()
    return {"loss": loss.detach().double(), "token_losses": losses.detach().double(),
            **{name: p.grad.double() for name, p in model.named_parameters()}}


def distributed_results(model: torch.nn.Module, layout: spattn.SequenceLayout, input_ids: torch.Tensor,
                        device: str = "cpu") -> Dict[str, torch.Tensor]:
    """The same on this rank's shard: every rank divides its summed token loss by the global count,
    so the sums over ranks (all_reduce) are the whole sequence's loss and gradients; the token
    losses are gathered from every rank's shard."""
    rank = dist.get_rank()
    input_ids = input_ids.to(device)
    targets = next_token_targets(input_ids)
    with torch.autocast("cuda", torch.bfloat16, enabled=device == "cuda"):
        losses = token_losses(model, layout.shard(input_ids, rank), layout.shard(targets, rank),
                              layout.positions(rank).to(device)[None])  # (B, S_local)
    local_loss = losses.sum() / (targets != IGNORE).sum()
    local_loss.backward()
    results = {"loss": local_loss.detach().double(), **{name: p.grad.double() for name, p in model.named_parameters()}}
    for tensor in results.values():
        dist.all_reduce(tensor)
    shards = [torch.empty_like(losses) for _ in range(dist.get_world_size())]
    dist.all_gather(shards, losses.detach().contiguous())
    results["token_losses"] = layout.unshard(shards).double()  # (B, S)
    return results


def accuracy_failures(distributed, single_process, reference) -> Dict[str, str]:
    """attention_checks' rule, over the loss and every parameter gradient."""
    failures = {}
    for name, expected in reference.items():
        floor = RELATIVE_FLOOR * expected.abs().max().item()
        error = max_error(distributed[name], expected)
        bound = 2 * max_error(single_process[name], expected) + floor
        if not (math.isfinite(error) and error <= bound):
            failures[name] = f"distributed error {error:.3g} > bound {bound:.3g}"
    return failures


@pytest.mark.parametrize("algorithm, architecture",
                         [(algorithm, "llama") for algorithm in ("zigzag", "ulysses", "ring", "allgather", "usp",
                                                                 "hamilton", "stripe")]
                         + [(algorithm, "mistral") for algorithm in ("zigzag", "ulysses", "ring")])
def test_loss_and_gradients_match_reference(algorithm, architecture):
    seed = fresh_seed()
    input_ids = torch.randint(VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))
    model = tiny_model(seed, "eager", architecture)
    reference = whole_sequence_results(copy.deepcopy(model).double(), input_ids)
    single_process = whole_sequence_results(copy.deepcopy(model), input_ids)

    model.set_attn_implementation(substitute_hf_flash_attn(group=None, algorithm=algorithm))
    config = model.config
    layout = spattn.sequence_layout(algorithm, SEQ, config.num_attention_heads, config.num_key_value_heads,
                                    causal=True)
    failures = accuracy_failures(distributed_results(model, layout, input_ids), single_process, reference)
    assert not failures, f"{architecture} on {algorithm} at {dist.get_world_size()} ranks, seed {seed}: {failures}"


def run_zigzag_shard(model: torch.nn.Module, position_shift: int = 0, **model_arguments):
    """The model forward on this rank's zigzag shard of a random sequence."""
    config = model.config
    layout = spattn.sequence_layout("zigzag", SEQ, config.num_attention_heads, config.num_key_value_heads,
                                    causal=True)
    rank = dist.get_rank()
    input_ids = layout.shard(torch.randint(VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0)), rank)
    position_ids = layout.positions(rank)[None] + position_shift
    return model(input_ids=input_ids, position_ids=position_ids, use_cache=False, **model_arguments)


def test_padding_on_one_rank_is_rejected_on_every_rank():
    model = tiny_model(0, substitute_hf_flash_attn(algorithm="zigzag"))
    local_seq = SEQ // dist.get_world_size()
    attention_mask = torch.ones(BATCH, local_seq, dtype=torch.long)
    last = dist.get_world_size() - 1
    if dist.get_rank() == last:
        attention_mask[0, -1] = 0  # a padded token in the last rank's shard only
    with raises_on_every_rank(last, "spattn attention takes no attention mask"):
        run_zigzag_shard(model, attention_mask=attention_mask)
    run_zigzag_shard(model, attention_mask=torch.ones(BATCH, local_seq, dtype=torch.long))  # all ones: no padding


def test_dropout_in_training_is_rejected():
    model = tiny_model(0, substitute_hf_flash_attn(algorithm="zigzag"), attention_dropout=0.1)
    with pytest.raises(ValueError, match="attention dropout 0.1 is not supported"):
        run_zigzag_shard(model.train())
    run_zigzag_shard(model.eval())  # no dropout in evaluation


def test_output_attentions_is_rejected():
    model = tiny_model(0, substitute_hf_flash_attn(algorithm="zigzag"))
    with pytest.raises(ValueError, match="output_attentions=True is not supported"):
        run_zigzag_shard(model, output_attentions=True)


def test_positions_other_than_the_layouts_are_rejected():
    model = tiny_model(0, substitute_hf_flash_attn(algorithm="zigzag"))
    with pytest.raises(ValueError, match="position_ids are not the global positions"):
        run_zigzag_shard(model, position_shift=1)


# Packed sequences (update_ring_flash_attn_params): 24 tokens that the ranks' boundaries cut inside
# sequences at 2 and 3 ranks, a sequence of one token among them.
PACKED_LENGTHS = [5, 1, 11, 7]


def packed_inputs(seed: int):
    """(input_ids, targets, position_ids), each (1, 24): a token predicts the next one of its own
    sequence (the last of each predicts nothing) and positions restart at 0 with each sequence."""
    input_ids = torch.randint(VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))
    targets, positions = [], []
    start = 0
    for length in PACKED_LENGTHS:
        targets.append(next_token_targets(input_ids[:, start:start + length]))
        positions.append(torch.arange(length))
        start += length
    return input_ids, torch.cat(targets, dim=1), torch.cat(positions)[None]


def per_sequence_results(model: torch.nn.Module, input_ids, targets) -> Dict[str, torch.Tensor]:
    """Loss, token losses and gradients of one process running each sequence on its own."""
    losses, start = [], 0
    for length in PACKED_LENGTHS:
        part = slice(start, start + length)
        losses.append(token_losses(model, input_ids[:, part], targets[:, part], torch.arange(length)[None]))
        start += length
    losses = torch.cat(losses, dim=1)
    loss = losses.sum() / (targets != IGNORE).sum()
    loss.backward()
    return {"loss": loss.detach().double(), "token_losses": losses.detach().double(),
            **{name: p.grad.double() for name, p in model.named_parameters()}}


def packed_distributed_results(model: torch.nn.Module, input_ids, targets, positions) -> Dict[str, torch.Tensor]:
    """The same with each rank feeding its contiguous stretch of the packed tokens."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    spattn.huggingface.update_ring_flash_attn_params(
        torch.tensor([0] + PACKED_LENGTHS, dtype=torch.int32).cumsum(0).to(torch.int32), None)
    stretch = slice(rank * SEQ // ranks, (rank + 1) * SEQ // ranks)
    try:
        losses = token_losses(model, input_ids[:, stretch], targets[:, stretch], positions[:, stretch])
    finally:
        spattn.huggingface.update_ring_flash_attn_params(None, None)
    local_loss = losses.sum() / (targets != IGNORE).sum()
    local_loss.backward()
    results = {"loss": local_loss.detach().double(), **{name: p.grad.double() for name, p in model.named_parameters()}}
    for tensor in results.values():
        dist.all_reduce(tensor)
    shards = [torch.empty_like(losses) for _ in range(ranks)]
    dist.all_gather(shards, losses.detach().contiguous())
    results["token_losses"] = torch.cat(shards, dim=1).double()
    return results


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_packed_sequences_match_a_per_sequence_reference(architecture):
    seed = fresh_seed()
    input_ids, targets, positions = packed_inputs(seed)
    model = tiny_model(seed, "eager", architecture)
    reference = per_sequence_results(copy.deepcopy(model).double(), input_ids, targets)
    single_process = per_sequence_results(copy.deepcopy(model), input_ids, targets)
    model.set_attn_implementation(substitute_hf_flash_attn(group=None, algorithm="zigzag"))
    failures = accuracy_failures(packed_distributed_results(model, input_ids, targets, positions), single_process,
                                 reference)
    where = f"{architecture}, packed {PACKED_LENGTHS} at {dist.get_world_size()} ranks, seed {seed}"
    assert not failures, f"{where}: {failures}"


def test_packed_positions_that_do_not_restart_are_rejected():
    model = tiny_model(0, substitute_hf_flash_attn(algorithm="zigzag"))
    input_ids, targets, _ = packed_inputs(0)
    rank, ranks = dist.get_rank(), dist.get_world_size()
    stretch = slice(rank * SEQ // ranks, (rank + 1) * SEQ // ranks)
    spattn.huggingface.update_ring_flash_attn_params(torch.tensor([0] + PACKED_LENGTHS).cumsum(0), None)
    try:
        with pytest.raises(ValueError, match="position_ids are not the positions of this rank's tokens in their "
                                             "packed sequences"):
            model(input_ids=input_ids[:, stretch], position_ids=torch.arange(SEQ)[None, stretch], use_cache=False)
    finally:
        spattn.huggingface.update_ring_flash_attn_params(None, None)
