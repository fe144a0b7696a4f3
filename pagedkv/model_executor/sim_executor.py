"""The simulated executor: no tensors, just how long a step takes (a roofline MODEL, not a
measurement).

:class:`SimExecutor` is the scheduler's fast executor (the other is a real model on the
paged pool): it runs nothing, produces no tokens (a simulated request's outputs come from
its workload) and times each pass with a :class:`StepTime`.

A decode step is memory-bound: it reads every weight once and every running request's KV
once, so it takes ``(weights_bytes + kv_tokens * cell_size) / hbm_bandwidth`` seconds (or the
compute time ``2 * num_params * batch / peak_flops`` when that is larger). A prefill is
compute-bound: ``2 * num_params * new_tokens`` FLOPs at the GPU's peak bf16 rate (or the
weight read, for tiny prefills). Both are lower bounds: real kernels reach perhaps 60-80 % of
peak bandwidth and 40-70 % of peak FLOP/s, and attention FLOPs, sampling, CPU scheduling
overhead and CUDA-graph padding are left out. Use it to turn arrival rates in requests/s
into queues, not to predict a server's latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pagedkv.errors import bad_value
from pagedkv.model_executor.forward_batch_info import ForwardBatch, ForwardResult


class StepTime(Protocol):
    """Seconds per scheduler step."""

    def prefill_s(self, new_tokens: int, kv_tokens: int) -> float:
        """A prefill of ``new_tokens`` prompt tokens while ``kv_tokens`` are cached."""
        ...

    def decode_s(self, batch_size: int, kv_tokens: int) -> float:
        """A decode step of ``batch_size`` requests reading ``kv_tokens`` KV tokens."""
        ...


@dataclass(frozen=True)
class RooflineStepTime:
    """Roofline step times from the GPU's peaks and the model's sizes.

    Attributes:
        weights_bytes: bytes of weights read per forward pass.
        num_params: parameters (2 FLOPs each per token).
        cell_size: KV bytes per token.
        hbm_bandwidth: bytes/s (datasheet peak).
        peak_flops: FLOP/s (datasheet dense bf16 peak).
    """

    weights_bytes: int
    num_params: int
    cell_size: int
    hbm_bandwidth: float
    peak_flops: float

    def __post_init__(self) -> None:
        for name in ("hbm_bandwidth", "peak_flops"):
            if not getattr(self, name) > 0:
                raise bad_value(name, getattr(self, name), "a positive rate")

    def _roofline(self, tokens: int, kv_tokens: int) -> float:
        read = (self.weights_bytes + kv_tokens * self.cell_size) / self.hbm_bandwidth
        return max(read, 2.0 * self.num_params * tokens / self.peak_flops)

    def prefill_s(self, new_tokens: int, kv_tokens: int) -> float:
        """``max(2 * num_params * new_tokens / peak_flops, bytes read / bandwidth)``."""
        return self._roofline(new_tokens, kv_tokens)

    def decode_s(self, batch_size: int, kv_tokens: int) -> float:
        """``max((weights + kv_tokens * cell) / bandwidth, 2 * num_params * batch / flops)``."""
        return self._roofline(batch_size, kv_tokens)


@dataclass(frozen=True)
class FixedStepTime:
    """Every step takes ``step_s`` seconds: for tests and toy examples on made-up pools."""

    step_s: float = 0.01

    def prefill_s(self, new_tokens: int, kv_tokens: int) -> float:
        """``step_s``."""
        return self.step_s

    def decode_s(self, batch_size: int, kv_tokens: int) -> float:
        """``step_s``."""
        return self.step_s


class SimExecutor:
    """Times passes with ``step_time`` and runs nothing (a
    :class:`~pagedkv.model_executor.forward_batch_info.StepTimePredictor`).

    Args:
        step_time: the step-time model (default: 10 ms per step).
    """

    predicts_step_times = True
    eos_token_ids: tuple[int, ...] = ()  # no tokens are sampled: requests stop at their length

    def __init__(self, step_time: StepTime | None = None) -> None:
        self.step_time = step_time or FixedStepTime()

    def forward(self, batch: ForwardBatch) -> ForwardResult:
        """An extend of ``sum(extend_lens)`` tokens or a decode of ``bs`` tokens, timed."""
        if batch.mode == "extend":
            return ForwardResult(self.step_time.prefill_s(int(batch.extend_lens.sum()),
                                                          batch.kv_tokens))
        return ForwardResult(self.step_time.decode_s(len(batch.reqs), batch.kv_tokens))

    def decode_seconds(self, batch_size: int, kv_tokens: int) -> float:
        """A decode step's modelled time (so the scheduler may take several at once)."""
        return self.step_time.decode_s(batch_size, kv_tokens)
