"""What the scheduler hands an executor for one forward pass, and what it gets back.

Follows SGLang's ``python/sglang/srt/model_executor/forward_batch_info.py`` (``ForwardBatch``,
``ForwardMode``), reduced to what pagedkv's two executors read: the simulated one
(:class:`~pagedkv.model_executor.sim_executor.SimExecutor`, which only needs token counts)
and a real model on the paged pool (``model_runner``, which reads every field).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # annotations only: the scheduler's layer sits above the executors
    from pagedkv.managers.req import Req
    from pagedkv.mem_cache.memory_pool import ReqToTokenPool


@dataclass(frozen=True)
class ForwardBatch:
    """One extend (prefill) or decode pass.

    Attributes:
        mode: ``"extend"`` or ``"decode"``.
        reqs: the requests, in batch order (``[bs]``).
        req_pool_indices: int64 ``[bs]`` rows of ``req_to_token``.
        prefix_lens: int64 ``[bs]`` tokens whose KV is already in the pool (decode: all but
            the newest token).
        extend_lens: int64 ``[bs]`` tokens computed now (decode: 1 each).
        out_cache_loc: int64 ``[sum(extend_lens)]`` slots the new tokens' K/V go to,
            request after request.
        sample: bool ``[bs]``: which requests sample a token (all but a chunk cut short).
        kv_tokens: tokens of KV the pass reads (the timing model's input).
        req_to_token_pool: the page table the rows index (a real model gathers each
            request's slots from it; SGLang's ``ForwardBatch`` carries it too). None: the
            executor needs no slots (the simulator).
        input_ids: int64 ``[bs]`` a decode's input tokens when the scheduler already has
            them but has not committed them to ``output_ids`` (the overlap loop: the token
            the in-flight pass sampled, SGLang's future map); None: each request's newest
            output token.
        mamba_track: a decode step's recorded states on a linear-attention hybrid with the
            mamba radix cache (:class:`pagedkv.mem_cache.mamba_track.DecodeTrack`), read
            when its result is processed; None otherwise.
    """

    mode: str
    reqs: list[Req]
    req_pool_indices: np.ndarray
    prefix_lens: np.ndarray
    extend_lens: np.ndarray
    out_cache_loc: np.ndarray
    sample: np.ndarray
    kv_tokens: int
    req_to_token_pool: ReqToTokenPool | None = None
    input_ids: np.ndarray | None = None
    mamba_track: Any = None

    @property
    def seq_lens(self) -> np.ndarray:
        """int64 ``[bs]`` tokens in KV after the pass."""
        return self.prefix_lens + self.extend_lens


@dataclass(frozen=True)
class ForwardResult:
    """How long the pass took (seconds; modelled or measured) and the sampled token of each
    sampling request (int64 ``[bs]``, -1 where none was sampled), or None when the executor
    does not produce tokens (the simulator: outputs come from the workload)."""

    seconds: float
    next_token_ids: np.ndarray | None = None


class Executor(Protocol):
    """Runs forward passes for the scheduler (SGLang's ``TpModelWorker`` / ``ModelRunner``).

    Attributes:
        predicts_step_times: what the executor is. True: a model of the GPU's time (the
            simulator), a :class:`StepTimePredictor`: it knows a step's time without running
            it and samples no tokens (a request's tokens are the workload's). False: it runs
            the passes (a real model): it samples the tokens, its times are measured.
        eos_token_ids: tokens that end a request when sampled (empty: none do).
    """

    predicts_step_times: bool
    eos_token_ids: Sequence[int]

    def forward(self, batch: ForwardBatch) -> ForwardResult:
        """Run ``batch``; its K/V go to ``batch.out_cache_loc``."""
        ...


class StepTimePredictor(Executor, Protocol):
    """An executor that predicts its step times (``predicts_step_times`` is True): the
    scheduler may then take many decode steps at once
    (:class:`~pagedkv.managers.scheduler_components.DecodeFastForward`)."""

    def decode_seconds(self, batch_size: int, kv_tokens: int) -> float:
        """A decode step's time (seconds) without running it."""
        ...
