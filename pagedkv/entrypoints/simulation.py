"""``simulate``: size the pool as SGLang would for a model on a GPU, then run the scheduler
with the simulated executor. :func:`prepare` does the first half alone, for callers that
drive the scheduler step by step (``pagedkv simulate`` on a trace file)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pagedkv.configs.mamba_utils import gdn_cache_params
from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_family import text_config
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import ConfigError
from pagedkv.gpus import GPUSpec, get_gpu
from pagedkv.managers.config import DEFAULT_SGLANG_VERSION, Policy, SchedulerConfig
from pagedkv.managers.req import Req, RequestLike
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_init import SlidingWindowPools
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.mamba_pool import MambaPool
from pagedkv.metrics.metrics import Metrics
from pagedkv.model_executor.sim_executor import RooflineStepTime
from pagedkv.sizing import KVPoolPlan, gpu_memory_defaults, plan_pool


@dataclass
class SimResult:
    """A finished simulation.

    Attributes:
        trace: step-by-step record (see :mod:`pagedkv.managers.trace`).
        metrics: summary numbers.
        requests: the requests with their final state (times, retractions).
        plan: the KV pool the run used.
        config: the scheduler constants the run used.
    """

    trace: Trace
    metrics: Metrics
    requests: list[Req]
    plan: KVPoolPlan
    config: SchedulerConfig


@dataclass(frozen=True)
class SimSetup:
    """Everything a simulated run needs but the requests: the pool, the scheduler's
    constants, the trace's ``meta`` and the step-time model.

    Attributes:
        plan: the KV pool SGLang would build.
        config: the scheduler constants.
        meta: the trace's ``meta`` block.
        step_time: the roofline step-time model (modelled seconds, not measured).
        radix_cache: the prefix cache on or off.
        context_len: the model's context length, tokens.
        mamba_pool: a linear-attention hybrid's state slots (``plan.mamba_slots`` of its
            state), None for other models.
        swa: a sliding-window hybrid's window and SWA pool (from ``plan``), None for one pool.
    """

    plan: KVPoolPlan
    config: SchedulerConfig
    meta: TraceMeta
    step_time: RooflineStepTime
    radix_cache: bool
    context_len: int
    mamba_pool: MambaPool | None = None
    swa: SlidingWindowPools | None = None

    def scheduler(self, requests: Iterable[RequestLike], *, record_page_tables: bool = False,
                  record_pages: bool = False, trace: Trace | SummaryTrace | None = None,
                  fast_forward: bool = True) -> Scheduler:
        """A :class:`Scheduler` over ``requests`` on this pool (``trace`` default: a full
        :class:`Trace`; ``fast_forward=False`` forces the step-by-step path, which gives the
        same run)."""
        return Scheduler(requests, max_total_num_tokens=self.plan.max_total_num_tokens,
                         page_size=self.meta.page_size, config=self.config,
                         radix_cache=self.radix_cache, context_len=self.context_len,
                         step_time=self.step_time, meta=self.meta,
                         record_page_tables=record_page_tables, record_pages=record_pages,
                         trace=trace, fast_forward=fast_forward, mamba_pool=self.mamba_pool,
                         swa=self.swa)


def prepare(
    *,
    model: str | ModelSpec = "llama-3-8b",
    gpu: str | GPUSpec = "h100-sxm-80gb",
    mem_fraction_static: float | None = None,
    page_size: int = 1,
    policy: str | Policy = Policy.SGLANG,
    radix_cache: bool = True,
    sglang_version: str = DEFAULT_SGLANG_VERSION,
    max_total_tokens: int | None = None,
    tp: int = 1,
    weights_bytes: int | None = None,
    arrival_rate: float | None = None,
    disable_hybrid_swa_memory: bool = False,
    **scheduler_options: object,
) -> SimSetup:
    """Size the pool SGLang would build and fix the scheduler's constants (what
    :func:`simulate` does before it runs).

    Args:
        model: preset name, ``config.json`` path or a :class:`ModelSpec`.
        gpu: preset name or a :class:`GPUSpec`.
        mem_fraction_static: default SGLang's for the GPU.
        page_size: tokens per page.
        policy: ``sglang``, ``reserve_all`` or ``no_reserve`` (see :class:`Policy`).
        radix_cache: SGLang's prefix cache on (its default) or off
            (``--disable-radix-cache``).
        sglang_version: the SGLang release followed, ``"0.5.23"`` or ``"0.5.9"``.
        max_total_tokens: cap on the pool in tokens (SGLang ``--max-total-tokens``).
        tp: attention tensor-parallel size; the pool is one GPU's (see ``plan_pool``).
        weights_bytes: weights per GPU, overriding the estimate (quantized models).
        arrival_rate: requests/s the workload was drawn at, recorded in the trace only.
        disable_hybrid_swa_memory: SGLang's ``--disable-hybrid-swa-memory``: a sliding-window
            hybrid that SGLang then sizes as one full-length pool (gpt-oss, Llama 4) runs on
            that one pool (see :func:`pagedkv.configs.model_presets.load_model`); without it
            it runs on its full and SWA pools (SGLang 0.5.23's hybrid scheduler).
        scheduler_options: any :class:`SchedulerConfig` field, e.g.
            ``schedule_conservativeness=0.5`` or ``disable_overlap_schedule=True`` (SGLang's
            ``--disable-overlap-schedule``: the normal loop instead of the default overlap
            loop); ``chunked_prefill_size`` defaults by GPU memory and
            ``max_running_requests`` to the pool's, as in SGLang.

    Raises:
        ConfigError: unknown preset, parameter out of range, a linear-attention hybrid
            with the radix cache on (its state slots run with it off), a sliding-window
            hybrid with ``sglang_version`` 0.5.9 (the hybrid scheduler follows 0.5.23).
        NotEnoughMemoryError: the weights leave no room for a pool.

    A sliding-window hybrid (gpt-oss, Llama 4) runs on its full and SWA pools, as SGLang
    0.5.23's scheduler runs them (the step-time model counts the full-attention KV only).
    A linear-attention hybrid (Qwen3-Next) runs on its full-attention KV pool and its state
    slots, sized with the radix cache off (one slot per request) and
    ``max_running_requests`` when given, as SGLang sizes them; each request holds a slot from
    admission to finish. The step-time model counts the full-attention KV only (reading
    the state slots is not modelled).
    """
    spec = model if isinstance(model, ModelSpec) else load_model(model, disable_hybrid_swa_memory)
    linear = spec.family == "linear"
    if linear and radix_cache:
        raise ConfigError(
            f"model={spec.name!r} is a linear-attention hybrid: radix_cache=True is invalid; "
            "valid: False (pass --disable-radix-cache): pagedkv runs its state slots without "
            "SGLang's radix cache over them (its mamba radix cache), which is not modelled")
    card = gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu)
    plan = plan_pool(spec, gpu=card, mem_fraction_static=mem_fraction_static, tp=tp,
                     page_size=page_size, max_total_tokens=max_total_tokens,
                     weights_bytes=weights_bytes, sglang_version=sglang_version,
                     disable_radix_cache=not radix_cache,
                     max_running_requests=(cast(int | None, scheduler_options.get(
                         "max_running_requests")) if linear else None))
    chunk, graph_bs = gpu_memory_defaults(card.memory_mib, tp, sglang_version)
    options: dict[str, object] = {
        "chunked_prefill_size": chunk,
        "cuda_graph_max_bs": graph_bs,
        "max_running_requests": plan.max_running_requests,
        **scheduler_options,
        "policy": policy,
        "sglang_version": sglang_version,
    }
    config = SchedulerConfig.from_env(**options)
    meta = TraceMeta(
        max_total_num_tokens=plan.max_total_num_tokens, page_size=plan.page_size, model=spec.name,
        gpu=card.name, policy=config.policy.value, sglang_version=sglang_version,
        radix_cache=radix_cache, mem_fraction_static=plan.mem_fraction_static,
        cell_size=plan.cell_size, gpu_memory_bytes=card.memory_bytes,
        weights_bytes=plan.weights_bytes, arrival_rate=arrival_rate,
        disable_overlap_schedule=config.disable_overlap_schedule)
    step_time = RooflineStepTime(plan.weights_bytes, spec.num_params, plan.cell_size,
                                 card.hbm_bandwidth, card.bf16_flops)
    mamba = (MambaPool(plan.mamba_slots, gdn_cache_params(text_config(spec.config), tp, spec.name))
             if linear else None)
    swa = None
    if plan.is_swa:
        assert plan.sliding_window is not None and plan.swa_max_total_num_tokens is not None
        swa = SlidingWindowPools(plan.sliding_window, plan.swa_max_total_num_tokens)
    return SimSetup(plan, config, meta, step_time, radix_cache, spec.context_len, mamba,
                    swa)


def simulate(requests: Sequence[RequestLike], *, record_page_tables: bool = False,
             record_pages: bool = False, fast_forward: bool = True, **options: Any) -> SimResult:
    """Run SGLang's scheduler over ``requests`` on the pool SGLang would build.

    Args:
        requests: workload entries (``pagedkv.workloads.synthetic.RequestSpec`` or alike), any order.
        record_page_tables: keep every step's page tables (small pools only).
        record_pages: record every page's owner changes (the visualizer's page events).
        fast_forward: False forces the step-by-step path (the reference the fast path is
            tested against; the results are the same, only slower).
        options: :func:`prepare`'s keyword arguments (``model``, ``gpu``, ``page_size``,
            ``policy``, ``radix_cache``, ... and any :class:`SchedulerConfig` field).

    Returns:
        :class:`SimResult`; times are modeled by :class:`RooflineStepTime`.
    Raises:
        ConfigError: unknown preset, parameter out of range, a request larger than the pool.
        NotEnoughMemoryError: the weights leave no room for a pool.
    """
    setup = prepare(**options)
    sched = setup.scheduler(requests, record_page_tables=record_page_tables,
                            record_pages=record_pages, fast_forward=fast_forward)
    trace = sched.run()
    return SimResult(trace, Metrics.from_run(sched.reqs, trace), sched.reqs, setup.plan,
                     setup.config)
