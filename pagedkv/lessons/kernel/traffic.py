"""Byte and FLOP arithmetic of one decode step (chapter 6), and an exercise check.

Chapter 6 reads these instead of doing the arithmetic in the notebook. Bytes are bytes;
``GB`` in the book is 10^9 bytes (bandwidths are quoted in GB/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pagedkv.errors import check_positive_int


def decode_bytes(
    seq_lens: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int,
    elem_bytes: int,
) -> int:
    """Bytes a decode step must move from HBM at least: K and V of every token, plus q and o.

    Counted as FlashInfer's benchmarks count them. Table reads and the split intermediates
    are left out (they are small next to K/V), so ``bytes / seconds`` is a lower bound on
    the bandwidth the kernel achieved.

    Args:
        seq_lens: ``[B]`` tokens per request.
        num_q_heads, num_kv_heads, head_dim: attention geometry.
        elem_bytes: bytes per element of q, K, V and o (2 for bf16).
    """
    kv = 2 * int(seq_lens.sum()) * num_kv_heads * head_dim * elem_bytes
    return kv + 2 * seq_lens.numel() * num_q_heads * head_dim * elem_bytes


@dataclass(frozen=True)
class DecodeTraffic:
    """One decode step of a uniform batch: bytes read per layer and per step, FLOPs per step.

    ``flops`` counts ``4 * L * H_q * D`` per request and layer (q·K and the weighted sum of V).
    """

    per_layer: int
    per_step: int
    flops: int

    @property
    def flops_per_byte(self) -> float:
        """Arithmetic intensity of the step."""
        return self.flops / self.per_step

    def min_seconds(self, bandwidth: float) -> float:
        """Shortest time to read ``per_step`` bytes at ``bandwidth`` bytes/s."""
        return self.per_step / bandwidth


def decode_traffic(batch: int, context: int, layers: int, num_q_heads: int, num_kv_heads: int,
                   head_dim: int, elem_bytes: int) -> DecodeTraffic:
    """``batch`` requests of ``context`` cached tokens each decode one token.

    Bytes follow :func:`decode_bytes` (K and V of every token, plus q and o), times ``layers``.
    Raises ConfigError for a non-positive size.
    """
    for name, v in (("batch", batch), ("context", context), ("layers", layers)):
        check_positive_int(name, v)
    per_layer = decode_bytes(torch.full((batch,), context), num_q_heads, num_kv_heads,
                             head_dim, elem_bytes)
    flops = layers * 4 * batch * context * num_q_heads * head_dim
    return DecodeTraffic(per_layer, layers * per_layer, flops)


def table_bytes(batch: int, context: int, page_size: int, index_bytes: int = 4) -> int:
    """Bytes of page table one layer's decode reads: one int32 id per page per request
    (``page_size`` 1: one slot id per token, SGLang's Triton backend)."""
    check_positive_int("page_size", page_size)
    return batch * math.ceil(context / page_size) * index_bytes


def within(answer: float | None, want: float, tolerance: float = 0.01) -> str:
    """An exercise check: ``"correct"`` within ``tolerance`` (relative) of ``want``."""
    if answer is None:
        return "no answer yet"
    return "correct" if abs(answer - want) <= tolerance * want else "not yet: count again"
