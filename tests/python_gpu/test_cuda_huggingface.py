"""A tiny random Llama on GPUs through spattn.huggingface, trained as people train it: fp32
parameters under bf16 autocast. Each token's loss and every parameter gradient of the distributed
model against the fp64 model on the whole sequence (CPU), by the project's criterion.

The baseline is the larger error of two runs without spattn: one GPU on the whole sequence with
PyTorch's SDPA, and the same token split as spattn's with PyTorch's attention (keys and values
all-gathered, SDPA under the global causal mask). Splitting the tokens rounds each rank's part of a
weight gradient to bf16 before the ranks sum them, whatever computes the attention; the second
run carries that error, so the criterion still measures spattn's attention alone."""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as distributed_autograd
from transformers import AttentionInterface

import spattn
from attention_checks import max_error
from spattn.huggingface import substitute_hf_flash_attn
from test_huggingface import (BATCH, SEQ, VOCAB, accuracy_failures, distributed_results, fresh_seed, tiny_model,
                              whole_sequence_results)


def on_cpu(results):
    return {name: tensor.cpu() for name, tensor in results.items()}


def register_gathered_sdpa(layout: spattn.SequenceLayout) -> str:
    """An attention implementation for transformers over `layout`'s shards without spattn."""
    rank = dist.get_rank()
    query_positions = layout.positions(rank).cuda()
    key_positions = torch.cat([layout.positions(other) for other in range(layout.ranks)]).cuda()
    visible = key_positions[None, :] <= query_positions[:, None]  # (S_local, S): causal in global positions

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        # query: (B, H, S_local, D); key, value: (B, HK, S_local, D) -> gathered (B, HK, S, D)
        keys, values = (torch.cat(distributed_autograd.all_gather(x.contiguous()), dim=2) for x in (key, value))
        out = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=visible, scale=scaling,
                                                               enable_gqa=True)
        return out.transpose(1, 2), None  # (B, S_local, H, D)

    AttentionInterface.register("gathered_sdpa", attention)
    return "gathered_sdpa"


@pytest.mark.parametrize("algorithm", ["zigzag", "ulysses", "ring"])
def test_llama_loss_and_gradients_match_reference(algorithm):
    seed = fresh_seed()
    input_ids = torch.randint(VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))
    model = tiny_model(seed, "sdpa")
    reference = whole_sequence_results(copy.deepcopy(model).double(), input_ids)
    config = model.config
    layout = spattn.sequence_layout(algorithm, SEQ, config.num_attention_heads, config.num_key_value_heads,
                                    causal=True)
    single_gpu = on_cpu(whole_sequence_results(copy.deepcopy(model).cuda(), input_ids, device="cuda"))
    split = copy.deepcopy(model).cuda()
    split.set_attn_implementation(register_gathered_sdpa(layout))
    same_split = on_cpu(distributed_results(split, layout, input_ids, device="cuda"))
    # The mean loss is one number, a single draw of bf16 rounding: two draws may differ by more
    # than 2x. Each token's loss (B x S of them) carries the same information, checked as a tensor.
    del reference["loss"]
    baseline = {name: max(single_gpu[name], same_split[name], key=lambda run: max_error(run, reference[name]))
                for name in reference}

    model = model.cuda()
    model.set_attn_implementation(substitute_hf_flash_attn(algorithm=algorithm))
    results = on_cpu(distributed_results(model, layout, input_ids, device="cuda"))
    failures = accuracy_failures(results, baseline, reference)
    assert not failures, f"llama on {algorithm} at {dist.get_world_size()} GPUs, seed {seed}: {failures}"
