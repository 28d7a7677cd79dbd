"""Hugging Face transformers models on spattn: one call registers spattn's distributed attention as an
attention implementation, the counterpart of ring-flash-attn's substitute_hf_flash_attn.

transformers picks a model's attention function by name, config._attn_implementation, from its
AttentionInterface registry (and the mask builder from AttentionMaskInterface; tested with 5.23);
registering a new name is its supported way to plug one in (replacing "flash_attention_2" would
still need the flash_attn package, which CPU machines lack). transformers is needed only here:
`import spattn` does not import this module.

    import spattn.huggingface
    rank, world_size, _ = spattn.setup_distributed()
    name = spattn.huggingface.substitute_hf_flash_attn(group=None, algorithm="zigzag")  # "spattn"
    model = LlamaForCausalLM(config)          # or from_pretrained(..., attn_implementation=name)
    model.set_attn_implementation(name)
    layout = spattn.sequence_layout("zigzag", seq_len, config.num_attention_heads,
                                    config.num_key_value_heads, causal=True)
    logits = model(input_ids=layout.shard(input_ids, rank),                    # (B, S_local)
                   position_ids=layout.positions(rank)[None],                  # global positions
                   use_cache=False).logits                                     # (B, S_local, vocab)

Every rank feeds its shard of the sequence in the layout of the algorithm; position_ids must be
the global positions of those tokens (layout.positions(rank)) so that rotary embeddings are right,
and the attention raises ValueError when they are not.

Packed sequences (batch 1, several sequences one after another), as ring-flash-attn's adapter
takes them: after update_ring_flash_attn_params(cu_seqlens, group), with the global cumulative
lengths, every rank feeds its contiguous stretch [r T/N, (r+1) T/N) of the packed tokens with
position_ids that restart at 0 with each sequence (Llama 3's context parallelism: the attention
runs spattn.llama3_flash_attn_varlen_func, whatever the algorithm), until the next update or
update_ring_flash_attn_params(None, group).

    spattn.huggingface.update_ring_flash_attn_params(cu_seqlens, group=None)   # every batch
    per_rank = total // world_size
    logits = model(input_ids=packed_ids[:, rank * per_rank:(rank + 1) * per_rank],
                   position_ids=packed_positions[:, rank * per_rank:(rank + 1) * per_rank],
                   use_cache=False).logits
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

from .communicator import communicator_for, raise_on_every_rank
from .functional import ATTENTION_FUNCTIONS
from .host_values import host_values
from .layout import sequence_layout
from .llama3 import llama3_flash_attn_prepare_cu_seqlens, llama3_flash_attn_varlen_func

# The packed sequences of each group's calls (update_ring_flash_attn_params): what
# llama3_flash_attn_prepare_cu_seqlens returned to this rank, by group (None: every rank).
_packed: Dict[Any, Tuple[Any, ...]] = {}


def update_ring_flash_attn_params(cu_seqlens: Optional[torch.Tensor], process_group: Any = None) -> None:
    """ring-flash-attn's: the models' spattn attention over `process_group` (None: every rank) runs
    from now on over the packed sequences of global `cu_seqlens` (1-D integers: 0, the running
    lengths, the total T, a multiple of the group's size), each rank feeding its stretch
    [r T/N, (r+1) T/N) with position_ids that restart at 0 with each sequence. None: back to whole
    sequences in the algorithm's layout."""
    if cu_seqlens is None:
        _packed.pop(process_group, None)
        return
    rank, world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
    _packed[process_group] = llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, True, rank, world_size)



def substitute_hf_flash_attn(group: Any = None, algorithm: str = "zigzag", name: str = "spattn") -> str:
    """Registers spattn's `algorithm` under the attention implementation `name` of transformers and
    returns `name`; a model then uses it after model.set_attn_implementation(name) (or
    attn_implementation=name at from_pretrained / from_config). Calling it again with another
    algorithm replaces the registration. `group`: the torch.distributed group the sequence is split
    over (None: every rank); the model's tensors may be on the CPU (over MPI) or on GPUs (NCCL)."""
    if algorithm not in ATTENTION_FUNCTIONS:
        raise ValueError(f"algorithm {algorithm!r} is not supported; allowed: {', '.join(ATTENTION_FUNCTIONS)}")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise ValueError(f"group={group!r} is not a torch.distributed process group; pass None (every rank) or "
                         "a group from torch.distributed.new_group")

    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                  sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                  is_causal: Optional[bool] = None, **kwargs):
        return spattn_attention_forward(module, query, key, value, attention_mask, dropout, scaling, sliding_window,
                                        softcap, is_causal, algorithm=algorithm, group=group, **kwargs)

    AttentionInterface.register(name, attention)
    # Without a mask function of its own, transformers hands a custom implementation no mask at all,
    # so padding would pass unnoticed; flash-attn's returns None unless some token is padding.
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name


def spattn_attention_forward(module: torch.nn.Module,
                             query: torch.Tensor,  # (B, H, S_local, D)
                             key: torch.Tensor,    # (B, HK, S_local, D)
                             value: torch.Tensor,  # (B, HK, S_local, D)
                             attention_mask: Optional[torch.Tensor], dropout: float, scaling: Optional[float],
                             sliding_window: Optional[int], softcap: Optional[float], is_causal: Optional[bool], *,
                             algorithm: str, group: Any, **kwargs):
    """transformers' attention interface over spattn: returns (out (B, S_local, H, D), None)."""
    causal = module.is_causal if is_causal is None else bool(is_causal)
    communicator = communicator_for(query.device, group)
    packed = _packed.get(group)
    problem = _unsupported_argument(query, key, attention_mask, dropout, softcap, kwargs)
    if packed is None:
        problem = problem or _wrong_positions(kwargs.get("position_ids"), algorithm, group, communicator, query.device,
                                              query.shape[2], query.shape[1], key.shape[1], causal)
    else:
        problem = problem or _wrong_packed_positions(kwargs.get("position_ids"), packed, communicator.rank,
                                                     query.shape[0], query.shape[2])
    # A padded shard, say, may be on one rank only: every rank raises, none waits in the attention.
    raise_on_every_rank(ValueError(problem) if problem else None, communicator)
    if query.is_cuda and query.dtype == torch.float32 and torch.is_autocast_enabled("cuda"):
        # Under autocast, rotary embeddings hand fp32 q and k on; the GPU kernels take 16-bit inputs,
        # so they get autocast's dtype, as transformers' flash-attention path does.
        dtype = torch.get_autocast_dtype("cuda")
        query, key, value = (tensor.to(dtype) for tensor in (query, key, value))
    # transformers' sliding_window w lets a token see w tokens in all, itself included: flash-attn's (w-1, w-1).
    window = (-1, -1) if sliding_window is None else (sliding_window - 1, -1 if causal else sliding_window - 1)
    query, key, value = (tensor.transpose(1, 2) for tensor in (query, key, value))  # (B, S_local, heads, D)
    if packed is None:
        out = ATTENTION_FUNCTIONS[algorithm](query, key, value, softmax_scale=scaling, causal=causal,
                                             window_size=window, group=group)
    else:  # batch 1: the packed tokens (T/N, heads, D)
        out = llama3_flash_attn_varlen_func(query[0], key[0], value[0], *packed[:4], key.shape[2], packed[4],
                                            softmax_scale=scaling, causal=causal, window_size=window,
                                            group=group)[None]
    return out, None  # no attention weights: spattn never forms them


def _unsupported_argument(query: torch.Tensor, key: torch.Tensor, attention_mask: Optional[torch.Tensor],
                          dropout: float, softcap: Optional[float], kwargs: dict) -> Optional[str]:
    """What this call asks for that spattn cannot do, or None."""
    if attention_mask is not None:
        return ("spattn attention takes no attention mask: every token of the sequence is attended (no padding); "
                "pass attention_mask=None or one of all ones")
    if dropout != 0.0:
        return (f"attention dropout {dropout} is not supported in training: spattn computes exact attention "
                "without dropout; set config.attention_dropout = 0.0")
    if kwargs.get("output_attentions"):
        return "output_attentions=True is not supported: spattn never forms the attention weights"
    if softcap is not None or kwargs.get("s_aux") is not None:
        return "attention logit softcapping and attention sinks (s_aux) are not supported by spattn"
    if key.shape[2] != query.shape[2]:
        return (f"spattn attention got {query.shape[2]} queries but {key.shape[2]} keys: it needs the keys of "
                "exactly this rank's tokens, so decoding with a KV cache is not supported (pass use_cache=False)")
    return None


def _wrong_packed_positions(position_ids: Optional[torch.Tensor], packed: Tuple[Any, ...], rank: int, batch: int,
                            local_seq: int) -> Optional[str]:
    """None when this rank's call fits the packed sequences of update_ring_flash_attn_params: batch 1,
    its stretch's length, and position_ids (when the model passes them on) that restart at 0 with
    each sequence."""
    cu_seqlens_q, _, _, _, local_k_slice = packed
    bounds = list(host_values(cu_seqlens_q))
    if batch != 1 or local_seq != bounds[-1]:
        return (f"the packed sequences of update_ring_flash_attn_params take batch 1 and this rank's stretch of "
                f"{bounds[-1]} tokens; got batch {batch} of {local_seq} tokens")
    if position_ids is None:
        return None
    # The first sequence may have begun on an earlier rank: it goes on from where that stretch ended.
    first = rank * bounds[-1] - local_k_slice.start
    expected = torch.cat([torch.arange(end - start) + (first if index == 0 else 0)
                          for index, (start, end) in enumerate(zip(bounds, bounds[1:]))])
    if position_ids.shape[-1] == local_seq and bool((position_ids.cpu() == expected).all()):
        return None
    return (f"position_ids are not the positions of this rank's tokens in their packed sequences (each restarts at "
            f"0; this rank's stretch holds sequences of local cu_seqlens {bounds}, the first from position {first}); "
            "pass them so that rotary embeddings are right")


def _wrong_positions(position_ids: Optional[torch.Tensor], algorithm: str, group: Any, communicator: Any,
                     device: torch.device, local_seq: int, heads: int, kv_heads: int, causal: bool) -> Optional[str]:
    """Rotary embeddings are computed from position_ids before attention, so wrong ones would go
    unnoticed there; None when they are this rank's global positions (or the model passes none on)."""
    if position_ids is None:
        return None
    rank = communicator.rank
    layout = sequence_layout(algorithm, local_seq * communicator.size, heads, kv_heads, causal=causal, group=group,
                             device=device)
    expected = layout.positions(rank).to(position_ids.device)
    if position_ids.shape[-1] == local_seq and bool((position_ids == expected).all()):
        return None
    chunks = [(position, length) for position, length, _ in layout.chunks(rank)]
    stride = f", tokens {layout.position_stride} apart" if layout.position_stride > 1 else ""
    return (f"position_ids are not the global positions of this rank's tokens in the {layout.name} layout "
            f"((start, length) chunks {chunks}{stride}); pass position_ids=layout.positions(rank)[None]")
