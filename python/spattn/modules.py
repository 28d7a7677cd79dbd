"""UlyssesAttention, the nn.Module of the original work's (and yunchang's) Ulysses attention."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from .functional import AttentionResult, ulysses_attn_func

# (scatter_idx, gather_idx) -> the layout of the module's tensors: heads are scattered over the
# ranks and the sequence is gathered. (2, 1) is flash-attn's and yunchang's (B, S_local, H, D);
# (2, 0) is DeepSpeed-Ulysses' and Megatron's sequence-first (S_local, B, H, D).
INDEX_CONVENTIONS = {(2, 1): "(B, S_local, H, D)", (2, 0): "(S_local, B, H, D)"}


def refuse_unsupported_call_arguments(module: str, softcap: float, extra_positional: Tuple[Any, ...]) -> None:
    """The forward arguments of the original modules that spattn cannot honour (the functions
    refuse the others: dropout, ALiBi)."""
    if softcap != 0.0:
        raise ValueError(f"softcap={softcap} is not supported: spattn applies no logit soft-capping; allowed: 0.0")
    if extra_positional:
        raise TypeError(f"{module}.forward got {len(extra_positional)} unexpected extra positional arguments")


class UlyssesAttention(torch.nn.Module):
    """Ulysses attention over `sequence_process_group`: an all-to-all from sequence shards to
    head shards, exact attention of the whole sequence on H/N heads, and back.

    Arguments as in the original work: `scatter_idx` (the heads dimension) and `gather_idx` (the
    sequence dimension): 2 and 1 for (B, S_local, H, D) tensors, 2 and 0 for sequence-first
    (S_local, B, H, D) ones. `use_sync` is accepted and changes nothing (spattn orders its
    transfers itself), and so is `attn_type`: spattn computes every block with its own kernels
    whatever attention backend it names. Those kernels on CUDA are `kernel`'s: "auto", "own" or
    "cudnn" (see spattn.functional). lse, with return_attn_probs, is (B, H, S_local) either way.
    """

    def __init__(self, sequence_process_group: Any = None, scatter_idx: int = 2, gather_idx: int = 1,
                 use_sync: bool = False, attn_type: Any = None, *, kernel: str = "auto") -> None:
        super().__init__()
        if (scatter_idx, gather_idx) not in INDEX_CONVENTIONS:
            allowed = "; ".join(f"scatter_idx={s}, gather_idx={g} for {layout}"
                                for (s, g), layout in INDEX_CONVENTIONS.items())
            raise ValueError(f"scatter_idx={scatter_idx}, gather_idx={gather_idx}; allowed: {allowed}")
        self.spg = sequence_process_group
        self.scatter_idx = scatter_idx
        self.gather_idx = gather_idx
        self.use_sync = use_sync
        self.attn_type = attn_type
        self.kernel = kernel

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float = 0.0,
                softmax_scale: Optional[float] = None, causal: bool = False,
                window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                return_attn_probs: bool = False, *args: Any) -> AttentionResult:
        """query (B, S_local, H, D), key and value (B, S_local, HK, D) -> (B, S_local, H, D), or
        each with its first two dimensions swapped for gather_idx=0."""
        refuse_unsupported_call_arguments("UlyssesAttention", softcap, args)
        sequence_first = self.gather_idx == 0
        if sequence_first:  # (S_local, B, H, D) -> (B, S_local, H, D), differentiable
            query, key, value = (x.transpose(0, 1) if isinstance(x, torch.Tensor) else x for x in (query, key, value))
        result = ulysses_attn_func(query, key, value, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                   deterministic, return_attn_probs, self.spg, kernel=self.kernel)
        if not sequence_first:
            return result
        if return_attn_probs:
            out, lse, probabilities = result
            return out.transpose(0, 1), lse, probabilities
        return result.transpose(0, 1)
