"""UlyssesAttention, the nn.Module of the original work's (and yunchang's) Ulysses attention."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from .functional import ulysses_attn_func

# Layout (B, S_local, H, D): heads are scattered over the ranks and the sequence is gathered.
_HEAD_DIM, _SEQUENCE_DIM = 2, 1


class UlyssesAttention(torch.nn.Module):
    """Ulysses attention over `sequence_process_group`: an all-to-all from sequence shards to
    head shards, exact attention of the whole sequence on H/N heads, and back.

    Arguments as in the original work: `scatter_idx` (the heads dimension, 2) and `gather_idx`
    (the sequence dimension, 1) of (B, S_local, H, D) tensors; no other layout is supported.
    `use_sync` is accepted and changes nothing (spattn orders its transfers itself), and so is
    `attn_type`: spattn computes every block with its own kernels whatever attention backend it
    names. Those kernels on CUDA are `kernel`'s: "auto", "own" or "cudnn" (see spattn.functional).
    """

    def __init__(self, sequence_process_group: Any = None, scatter_idx: int = _HEAD_DIM,
                 gather_idx: int = _SEQUENCE_DIM, use_sync: bool = False, attn_type: Any = None, *,
                 kernel: str = "auto") -> None:
        super().__init__()
        if (scatter_idx, gather_idx) != (_HEAD_DIM, _SEQUENCE_DIM):
            raise ValueError(f"scatter_idx={scatter_idx}, gather_idx={gather_idx}: spattn's Ulysses takes "
                             f"(B, S_local, H, D) tensors; allowed: scatter_idx={_HEAD_DIM}, gather_idx={_SEQUENCE_DIM}")
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
                return_attn_probs: bool = False, *args: Any) -> torch.Tensor:
        """query (B, S_local, H, D), key and value (B, S_local, HK, D) -> (B, S_local, H, D)."""
        if softcap != 0.0:
            raise ValueError(f"softcap={softcap} is not supported: spattn applies no logit soft-capping; allowed: 0.0")
        if args:
            raise TypeError(f"UlyssesAttention.forward got {len(args)} unexpected extra positional arguments")
        return ulysses_attn_func(query, key, value, dropout_p, softmax_scale, causal, window_size, alibi_slopes,
                                 deterministic, return_attn_probs, self.spg, kernel=self.kernel)
