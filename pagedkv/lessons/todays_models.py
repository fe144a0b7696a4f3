"""Chapter 9's worked examples: today's models sized pool by pool as SGLang 0.5.23 does.

Each example is a model preset on a card at a tensor-parallel size and a KV dtype;
:func:`example_plan` sizes it with :func:`pagedkv.sizing.plan_pool` and :func:`hbm_split`
divides one GPU's memory into the pools SGLang builds (``model_runner.py``,
``pool_configurator.py``, ``swa_memory_pool.py``, the mamba pools); :func:`decode_read` says
what one decode step of an example reads under the simulator's step-time model (a roofline
MODEL, :mod:`pagedkv.model_executor.sim_executor`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import load_model
from pagedkv.entrypoints.simulation import roofline_step_time
from pagedkv.errors import NotEnoughMemoryError, check_positive_int
from pagedkv.gpus import get_gpu
from pagedkv.pool_plan import KVPoolPlan
from pagedkv.sizing import plan_pool


@dataclass(frozen=True)
class Example:
    """One worked example: a preset served on ``tp`` cards of one kind."""

    model: str
    gpu: str
    tp: int
    kv_cache_dtype: str = "bf16"


EXAMPLES = {
    "gpt-oss-120b": Example("gpt-oss-120b", "h100-sxm-80gb", 1),
    "qwen3-next-80b-a3b": Example("qwen3-next-80b-a3b", "h200-141gb", 4),
    "deepseek-v3": Example("deepseek-v3", "h200-141gb", 8, "fp8_e4m3"),
    "mixtral-8x7b": Example("mixtral-8x7b", "h100-sxm-80gb", 2),
    "gemma-3-27b": Example("gemma-3-27b", "h100-sxm-80gb", 1),
    "llama-4-scout": Example("llama-4-scout", "h200-141gb", 4),
}
FIGURE_GPUS = ("h100-sxm-80gb", "h200-141gb", "mi300x")
SEGMENTS = ("weights", "full KV", "SWA KV", "state slots", "the rest")


def example_plan(name: str, gpu: str | None = None, *, model: ModelSpec | None = None,
                 **kwargs: object) -> KVPoolPlan:
    """The plan of example ``name`` (on ``gpu`` instead of its own card if given; ``model``:
    another spec of the same checkpoint, e.g. ``load_model(name, True)`` for
    ``--disable-hybrid-swa-memory``); keyword arguments go to :func:`plan_pool`.

    Raises:
        NotEnoughMemoryError: the weights leave no room, as SGLang stops at start-up.
        ConfigError: a setting :func:`plan_pool` refuses.
    """
    ex = EXAMPLES[name]
    # the preset's own weights: a quantized one's are SGLang's model built on the meta device
    return plan_pool(model or ex.model, gpu=gpu or ex.gpu, tp=ex.tp, kv_cache_dtype=ex.kv_cache_dtype,
                     **kwargs)


def hbm_split(plan: KVPoolPlan) -> dict[str, int]:
    """One GPU's memory in bytes by :data:`SEGMENTS`: weights, the full-attention KV pool, the
    sliding-window KV pool, the state slots, and the rest (activations, CUDA graphs, what
    ``1 - mem_fraction_static`` keeps back). Sums to the card (``pre_free_bytes``). The state
    slots count the padding slot SGLang allocates beside the ``mamba_slots`` usable ones, as
    its "Mamba Cache is allocated" line does."""
    full = plan.max_total_num_tokens * plan.cell_size
    swa = (plan.swa_max_total_num_tokens or 0) * plan.swa_cell_size
    state = (plan.mamba_slots + 1) * plan.state_bytes if plan.mamba_slots else 0
    parts = {"weights": plan.weights_bytes, "full KV": full, "SWA KV": swa, "state slots": state}
    return {**parts, "the rest": plan.pre_free_bytes - sum(parts.values())}


def cap_at(plan: KVPoolPlan, context_len: int) -> int:
    """Requests that can run at once if every one grows to ``context_len`` tokens: ``B_max``
    over every pool, and at most ``max_running_requests`` (which a linear-attention hybrid's
    state slots cap: 5 slots per request with the radix cache by default, SGLang 0.5.23
    ``resolve_max_num_reqs``)."""
    return min(replace(plan, context_len=context_len).batch_cap, plan.max_running_requests)


def figure_splits() -> dict[str, dict[str, dict[str, int] | None]]:
    """:func:`hbm_split` of every example on every card of :data:`FIGURE_GPUS` (at the
    example's tp and SGLang 0.5.23's default fraction); ``None`` where SGLang would stop."""
    out: dict[str, dict[str, dict[str, int] | None]] = {}
    for name in EXAMPLES:
        out[name] = {}
        for gpu in FIGURE_GPUS:
            try:
                out[name][gpu] = hbm_split(example_plan(name, gpu))
            except NotEnoughMemoryError:
                out[name][gpu] = None
    return out


@dataclass(frozen=True)
class DecodeRead:
    """One modelled decode step of a worked example on one GPU.

    Attributes:
        batch_size: running requests, each holding ``tokens`` tokens of KV.
        experts_touched: expected routed experts read per MoE layer (0: a dense model).
        weights_bytes: weight bytes read (the dense part plus the experts touched).
        kv_bytes: KV bytes read (window layers: at most the window per request).
        state_bytes: state bytes read and written (linear-attention layers).
        seconds: the step's modelled time.
    """

    batch_size: int
    experts_touched: float
    weights_bytes: float
    kv_bytes: int
    state_bytes: int
    seconds: float


def decode_read(name: str, batch_size: int, tokens: int) -> DecodeRead:
    """What one decode step of example ``name`` reads when ``batch_size`` requests hold
    ``tokens`` tokens each (its :func:`example_plan`, the step time of
    :func:`pagedkv.entrypoints.simulation.roofline_step_time`).

    Raises:
        ConfigError: ``batch_size`` < 1 or ``tokens`` < 0.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("tokens", tokens, 0)
    ex, plan = EXAMPLES[name], example_plan(name)
    step = roofline_step_time(load_model(ex.model), plan, get_gpu(ex.gpu))
    touched, weights = 0.0, float(plan.weights_bytes)
    if step.experts is not None:
        touched = step.experts.experts_touched(batch_size)
        weights += step.experts.bytes_read(batch_size) - step.experts.routed_bytes
    swa = None if step.sliding_window is None else batch_size * min(tokens, step.sliding_window)
    kv = batch_size * tokens * step.cell_size + (swa or 0) * step.swa_cell_size
    return DecodeRead(batch_size, touched, weights, kv, 2 * step.state_bytes * batch_size,
                      step.decode_s(batch_size, batch_size * tokens, swa))
