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

Today's model families change what a step reads and computes (:class:`RooflineStepTime`'s
optional fields; a dense model leaves them at their defaults and its times are the formulas
above, to the last bit):

- mixture of experts: FLOPs per token from the ACTIVE parameters (all but the routed experts,
  plus ``k / E`` of those); a pass over ``b`` tokens reads the dense part and, per MoE layer,
  the experts its tokens are routed to: ``E * (1 - (1 - k/E)^b)`` of ``E`` on average when
  each token picks ``k`` experts uniformly at random. Uniform routing is a modelling choice
  (real routers are skewed, which touches fewer experts);
- sliding-window hybrids: a window layer reads at most ``window`` tokens of each request, a
  full layer all of them: ``sum_r full_cell * len_r + swa_cell * min(len_r, window)``;
- linear-attention hybrids: the full-attention layers read KV; every decode step reads and
  writes each running request's state slot (``2 * state_bytes`` per request);
- MLA: the cell is the latent (``kv_lora_rank + qk_rope_head_dim`` per layer), which is what
  the attention reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pagedkv.errors import ConfigError, bad_value, check_positive_int
from pagedkv.model_executor.forward_batch_info import ForwardBatch, ForwardResult


class StepTime(Protocol):
    """Seconds per scheduler step.

    Attributes:
        sliding_window: tokens a window layer reads per request (None: no window layers);
            the executor then passes ``swa_kv_tokens``, the batch's window-clipped KV.
    """

    sliding_window: int | None

    def prefill_s(self, new_tokens: int, kv_tokens: int,
                  swa_kv_tokens: int | None = None) -> float:
        """A prefill of ``new_tokens`` prompt tokens while ``kv_tokens`` are cached."""
        ...

    def decode_s(self, batch_size: int, kv_tokens: int,
                 swa_kv_tokens: int | None = None) -> float:
        """A decode step of ``batch_size`` requests reading ``kv_tokens`` KV tokens."""
        ...


@dataclass(frozen=True)
class RoutedExperts:
    """A mixture of experts' routed weights, as one GPU reads them.

    Attributes:
        routed_bytes: bytes of the routed experts of every MoE layer on one GPU (part of
            ``RooflineStepTime.weights_bytes``).
        num_experts: ``E``, routed experts per MoE layer.
        num_experts_per_tok: ``k``, experts each token is routed to (``1 <= k <= E``).
    """

    routed_bytes: int
    num_experts: int
    num_experts_per_tok: int

    def __post_init__(self) -> None:
        check_positive_int("routed_bytes", self.routed_bytes, 0)
        check_positive_int("num_experts", self.num_experts)
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise bad_value("num_experts_per_tok", self.num_experts_per_tok,
                            f"an integer in 1..num_experts={self.num_experts}")

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per MoE layer that ``tokens`` tokens are routed to, each
        picking ``k`` of ``E`` uniformly: ``E * (1 - (1 - k/E)^tokens)`` (0 for no tokens;
        ``k`` for one; towards ``E`` as ``tokens`` grows)."""
        e, k = self.num_experts, self.num_experts_per_tok
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def bytes_read(self, tokens: int) -> float:
        """Routed bytes a pass over ``tokens`` tokens reads: ``routed_bytes`` times the share
        of experts touched."""
        return self.routed_bytes * self.experts_touched(tokens) / self.num_experts


@dataclass(frozen=True)
class RooflineStepTime:
    """Roofline step times from the GPU's peaks and the model's sizes.

    A pass over ``tokens`` tokens (a prefill's new tokens, a decode's batch size) takes
    ``max(bytes read / hbm_bandwidth, 2 * flop_params * tokens / peak_flops)`` seconds,
    where bytes read = weights read + ``kv_tokens * cell_size`` (+ the window layers'
    ``swa_kv_tokens * swa_cell_size``, + a decode's ``2 * state_bytes * batch_size``).

    Attributes:
        weights_bytes: bytes of weights one GPU holds (all of it is read per pass unless
            ``experts`` says otherwise).
        num_params: parameters (2 FLOPs each per token; a MoE's active ones:
            ``active_params``).
        cell_size: KV bytes per token of the full-attention layers (a one-pool model: all).
        hbm_bandwidth: bytes/s (datasheet peak).
        peak_flops: FLOP/s (datasheet dense bf16 peak).
        experts: a mixture of experts' routed weights (None: dense; every weight is read).
        active_params: parameters one token runs through (None: ``num_params``).
        swa_cell_size: KV bytes per token of the window layers (0: none).
        sliding_window: tokens a window layer reads per request (None: no window layers).
        state_bytes: one request's state slot over the linear-attention layers (0: none),
            read and written every decode step.

    Raises:
        ConfigError: a rate that is not positive and finite, a negative size, window layers
            without a window.
    """

    weights_bytes: int
    num_params: int
    cell_size: int
    hbm_bandwidth: float
    peak_flops: float
    experts: RoutedExperts | None = None
    active_params: int | None = None
    swa_cell_size: int = 0
    sliding_window: int | None = None
    state_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("hbm_bandwidth", "peak_flops"):
            value = getattr(self, name)
            if not (value > 0 and np.isfinite(value)):
                raise bad_value(name, value, "a positive, finite rate")
        for name in ("swa_cell_size", "state_bytes"):
            check_positive_int(name, getattr(self, name), 0)
        if self.sliding_window is not None:
            check_positive_int("sliding_window", self.sliding_window)
        elif self.swa_cell_size:
            raise bad_value("sliding_window", None,
                            f"an integer >= 1 when swa_cell_size={self.swa_cell_size} > 0")
        if self.experts is not None and self.experts.routed_bytes > self.weights_bytes:
            raise bad_value("experts.routed_bytes", self.experts.routed_bytes,
                            f"at most weights_bytes={self.weights_bytes}")

    def _roofline(self, tokens: int, kv_tokens: int, swa_kv_tokens: int | None,
                  state_io: int) -> float:
        weights: float = self.weights_bytes
        if self.experts is not None:  # the dense part, then the experts routed to
            weights = self.weights_bytes - self.experts.routed_bytes + self.experts.bytes_read(tokens)
        kv = kv_tokens * self.cell_size
        if self.sliding_window is not None:
            if swa_kv_tokens is None:
                raise ConfigError(
                    "swa_kv_tokens=None is invalid for a model with window layers; valid: the "
                    "batch's sum of min(len, sliding_window) (SimExecutor passes it)")
            kv += swa_kv_tokens * self.swa_cell_size
        read = (weights + kv + state_io) / self.hbm_bandwidth
        params = self.num_params if self.active_params is None else self.active_params
        return max(read, 2.0 * params * tokens / self.peak_flops)

    def prefill_s(self, new_tokens: int, kv_tokens: int,
                  swa_kv_tokens: int | None = None) -> float:
        """``max(2 * params * new_tokens / peak_flops, bytes read / bandwidth)``; the state
        slots' traffic is left out (a prefill is compute-bound)."""
        return self._roofline(new_tokens, kv_tokens, swa_kv_tokens, 0)

    def decode_s(self, batch_size: int, kv_tokens: int,
                 swa_kv_tokens: int | None = None) -> float:
        """``max(bytes read / bandwidth, 2 * params * batch / flops)``, bytes read including
        ``2 * state_bytes * batch_size`` (each state slot read and written once)."""
        return self._roofline(batch_size, kv_tokens, swa_kv_tokens,
                              2 * self.state_bytes * batch_size)


@dataclass(frozen=True)
class FixedStepTime:
    """Every step takes ``step_s`` seconds: for tests and toy examples on made-up pools."""

    step_s: float = 0.01
    sliding_window: int | None = None  # reads no KV: the window is never asked for

    def prefill_s(self, new_tokens: int, kv_tokens: int,
                  swa_kv_tokens: int | None = None) -> float:
        """``step_s``."""
        return self.step_s

    def decode_s(self, batch_size: int, kv_tokens: int,
                 swa_kv_tokens: int | None = None) -> float:
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
        """An extend of ``sum(extend_lens)`` tokens or a decode of ``bs`` tokens, timed; with
        window layers, the KV they read is ``sum(min(prefix_lens, sliding_window))``."""
        window = self.step_time.sliding_window
        swa = None if window is None else int(np.minimum(batch.prefix_lens, window).sum())
        if batch.mode == "extend":
            return ForwardResult(self.step_time.prefill_s(int(batch.extend_lens.sum()),
                                                          batch.kv_tokens, swa))
        return ForwardResult(self.step_time.decode_s(len(batch.reqs), batch.kv_tokens, swa))

    def decode_seconds(self, batch_size: int, kv_tokens: int) -> float:
        """A decode step's modelled time (so the scheduler may take several at once): a model
        without window layers only (the scheduler's fast-forward is not built for one).

        Raises:
            ConfigError: the step time has window layers (it needs each request's length).
        """
        return self.step_time.decode_s(batch_size, kv_tokens)
