"""The simulated executor's front door: an :class:`~pagedkv.entrypoints.engine.Engine` on the
pool SGLang would build for a model preset on a GPU preset (:func:`simulated_engine`), and
:func:`simulate`, which serves a workload on it. A run goes through :meth:`Engine.run` like a
real model's and returns the same :class:`~pagedkv.entrypoints.engine_outcome.EngineResult`."""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, cast

import numpy as np

from pagedkv.configs.mamba_utils import gdn_cache_params
from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_family import text_config
from pagedkv.configs.model_presets import load_model
from pagedkv.entrypoints.engine import Engine
from pagedkv.entrypoints.engine_outcome import EngineResult
from pagedkv.errors import bad_value
from pagedkv.gpus import GPUSpec, get_gpu
from pagedkv.managers.config import DEFAULT_SGLANG_VERSION, Policy, SchedulerConfig
from pagedkv.managers.req import RequestLike
from pagedkv.managers.scheduler_init import SlidingWindowPools
from pagedkv.managers.trace import TraceMeta
from pagedkv.mem_cache.mamba_pool import MambaPool
from pagedkv.model_executor.sim_executor import RooflineStepTime, RoutedExperts, SimExecutor
from pagedkv.pool_plan import KVPoolPlan
from pagedkv.sizing import gpu_memory_defaults, plan_pool
from pagedkv.workloads.request_files import load_requests
from pagedkv.workloads.request_rows import RequestFile, relative_arrivals


def roofline_step_time(spec: ModelSpec, plan: KVPoolPlan, card: GPUSpec) -> RooflineStepTime:
    """The step-time model of ``spec`` served on ``plan``'s pools on ``card``
    (:class:`RooflineStepTime`, a MODEL: see :mod:`pagedkv.model_executor.sim_executor`).

    A dense model: ``plan.weights_bytes``, ``spec.num_params`` and ``plan.cell_size``. A
    mixture of experts adds its routed share of the weights, ``weights_bytes *
    routed_params / num_params`` (exact for a checkpoint stored in one dtype; where the
    experts are quantized more than the rest, gpt-oss's mxfp4, it overstates their share)
    and its active parameters; a sliding-window hybrid on its two pools the window layers'
    cell and window; a linear-attention hybrid its state slot's bytes.

    Raises:
        ConfigError: a MoE config without a valid ``num_experts_per_tok``, or one whose
            routed experts transformers cannot count.
    """
    experts = active = None
    if spec.is_moe:
        active = spec.num_active_params  # checks num_experts_per_tok
        routed = plan.weights_bytes * spec.num_routed_expert_params // spec.num_params
        experts = RoutedExperts(routed, spec.num_experts, spec.num_experts_per_tok)
    return RooflineStepTime(
        plan.weights_bytes, spec.num_params, plan.cell_size, card.hbm_bandwidth,
        card.bf16_flops, experts=experts, active_params=active,
        swa_cell_size=plan.swa_cell_size if plan.is_swa else 0,
        sliding_window=plan.sliding_window if plan.is_swa else None,
        state_bytes=plan.state_bytes)


# options that belong to the requests, not the engine: where to give them instead
_MISPLACED = {"rate": "arrival times belong to the requests: sharegpt_like(n, rate=R) draws them",
              "num_requests": "the requests are the first argument"}


def _check_options(scheduler_options: dict[str, object]) -> None:
    """Refuse a keyword that is neither :func:`simulated_engine`'s nor a
    :class:`SchedulerConfig` field, naming the closest valid one (instead of the
    ``TypeError`` a dataclass raises, which names an internal class).

    Raises:
        ConfigError: the first unknown keyword.
    """
    known = {f.name for f in fields(SchedulerConfig)} - {"release"}
    for name in scheduler_options:
        if name in known:
            continue
        close = difflib.get_close_matches(name, [*_ENGINE_OPTIONS, *sorted(known)], n=1)
        hint = _MISPLACED.get(name) or (f"did you mean {close[0]}?" if close else "")
        raise bad_value("option", name, f"a keyword of simulated_engine "
                        f"({', '.join(_ENGINE_OPTIONS)}) or a SchedulerConfig field "
                        f"({', '.join(sorted(known))})" + (f"; {hint}" if hint else ""))


def _chunk_for_sizing(scheduler_options: dict[str, object]) -> int | None:
    """``plan_pool``'s ``chunked_prefill_size`` from the scheduler's: left out, None (the
    GPU's default); given as None (no chunking), SGLang's -1."""
    if "chunked_prefill_size" not in scheduler_options:
        return None
    chunk = scheduler_options["chunked_prefill_size"]
    return -1 if chunk is None else cast(int, chunk)


def simulated_engine(
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
    kv_cache_dtype: str = "bf16",
    context_len: int | None = None,
    weights_bytes: int | None = None,
    arrival_rate: float | None = None,
    disable_hybrid_swa_memory: bool = False,
    record_pages: bool = False,
    core: str = "reference",
    **scheduler_options: object,
) -> Engine:
    """An engine with the simulated executor (:class:`RooflineStepTime` for the GPU) on the
    pool SGLang would build for ``model`` on ``gpu``, with SGLang's defaults for the card.

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
        tp: attention tensor-parallel size; the pool is one GPU's (see ``plan_pool``), and
            so are the step times: no communication between GPUs is modelled.
        kv_cache_dtype: SGLang's ``--kv-cache-dtype`` (``bf16``, ``fp16``, ``fp8_e4m3``,
            ``fp8_e5m2``): the pool's bytes per token, and the KV a decode step reads.
        context_len: SGLang's ``--context-length`` (default the model's; see ``plan_pool``).
        weights_bytes: weights per GPU, overriding the estimate (quantized models).
        arrival_rate: requests/s the workload was drawn at, recorded in the trace only.
        disable_hybrid_swa_memory: SGLang's ``--disable-hybrid-swa-memory``: a sliding-window
            hybrid that SGLang then sizes as one full-length pool (gpt-oss, Llama 4) runs on
            that one pool (see :func:`pagedkv.configs.model_presets.load_model`); without it
            it runs on its full and SWA pools (SGLang 0.5.23's hybrid scheduler).
        record_pages: record every page's owner changes (the visualizer's page events).
        core: the scheduler loop its runs take (:class:`Engine`'s ``core``): ``"reference"``,
            ``"compiled"`` or ``"auto"``.
        scheduler_options: any :class:`SchedulerConfig` field, e.g.
            ``schedule_conservativeness=0.5`` or ``disable_overlap_schedule=True`` (SGLang's
            ``--disable-overlap-schedule``: the normal loop instead of the default overlap
            loop); ``chunked_prefill_size`` defaults by GPU memory, as in SGLang;
            ``max_running_requests`` (SGLang's ``--max-running-requests``) is sized as SGLang
            sizes it (:func:`~pagedkv.sizing.plan_pool`: 0.5.23 caps it at half the pool, a
            linear-attention hybrid's state slots cap it, a sliding-window hybrid without the
            radix cache sizes its SWA pool from it), and defaults to the pool's.

    Raises:
        ConfigError: unknown preset, parameter out of range (a linear-attention hybrid
            with the radix cache on: pages not dividing 256), a hybrid with
            ``sglang_version`` 0.5.9 (the hybrid scheduler follows 0.5.23; a
            linear-attention hybrid runs under 0.5.9 with the radix cache off), refused
            here, before any run (:func:`~pagedkv.managers.scheduler_init.check_hybrid_release`).
        NotEnoughMemoryError: the weights leave no room for a pool.

    A sliding-window hybrid (gpt-oss, Llama 4) runs on its full and SWA pools, as SGLang
    0.5.23's scheduler runs them. A linear-attention hybrid (Qwen3-Next) runs on its
    full-attention KV pool and its state slots, sized as SGLang sizes them (with the radix
    cache, 3 slots per running request plus the track slots of its ``extra_buffer``
    strategy; without, one) and ``max_running_requests`` when given; each request holds a
    slot from admission to finish, and with the radix cache its track slots, whose recorded
    states the tree keeps (:class:`~pagedkv.mem_cache.mamba_cache.MambaPrefixCache`). The
    step times: :func:`roofline_step_time`.
    """
    _check_options(scheduler_options)
    spec = model if isinstance(model, ModelSpec) else load_model(model, disable_hybrid_swa_memory)
    linear = spec.family == "linear"
    card = gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu)
    plan = plan_pool(spec, gpu=card, mem_fraction_static=mem_fraction_static, tp=tp,
                     page_size=page_size, kv_cache_dtype=kv_cache_dtype,
                     context_len=context_len, max_total_tokens=max_total_tokens,
                     weights_bytes=weights_bytes, sglang_version=sglang_version,
                     disable_radix_cache=not radix_cache,
                     max_running_requests=cast(int | None, scheduler_options.get(
                         "max_running_requests")),
                     disable_overlap_schedule=bool(scheduler_options.get(
                         "disable_overlap_schedule", False)),
                     # a hybrid's pools depend on it; plan_pool's -1 is the scheduler's None
                     chunked_prefill_size=_chunk_for_sizing(scheduler_options))
    chunk, graph_bs = gpu_memory_defaults(card.memory_mib, tp, sglang_version)
    options: dict[str, object] = {
        "chunked_prefill_size": chunk,
        "cuda_graph_max_bs": graph_bs,
        **scheduler_options,
        # SGLang's cap: --max-running-requests as its sizing resolves it (0.5.23: at most
        # half the pool; a linear-attention hybrid's state slots), else the pool's own
        "max_running_requests": plan.max_running_requests,
        "policy": policy,
    }
    step_time = roofline_step_time(spec, plan, card)
    mamba = (MambaPool(plan.mamba_slots, gdn_cache_params(text_config(spec.config), tp, spec.name))
             if linear else None)
    swa = None
    if plan.is_swa:
        assert plan.sliding_window is not None and plan.swa_max_total_num_tokens is not None
        swa = SlidingWindowPools(plan.sliding_window, plan.swa_max_total_num_tokens)
    engine = Engine(SimExecutor(step_time), max_total_num_tokens=plan.max_total_num_tokens,
                    page_size=plan.page_size, radix_cache=radix_cache,
                    sglang_version=sglang_version,
                    context_len=plan.context_len, record_pages=record_pages, plan=plan,
                    mamba_pool=mamba, swa=swa, core=core, **options)
    config = engine.config
    engine.meta = TraceMeta(
        max_total_num_tokens=plan.max_total_num_tokens, page_size=plan.page_size, model=spec.name,
        gpu=card.name, policy=config.policy.value, sglang_version=sglang_version,
        radix_cache=radix_cache, mem_fraction_static=plan.mem_fraction_static,
        cell_size=plan.cell_size, gpu_memory_bytes=card.memory_bytes,
        weights_bytes=plan.weights_bytes, arrival_rate=arrival_rate,
        disable_overlap_schedule=config.disable_overlap_schedule,
        swa_max_total_num_tokens=None if swa is None else swa.max_total_num_tokens_swa,
        swa_cell_size=plan.swa_cell_size if swa is not None else 0,
        sliding_window=None if swa is None else swa.sliding_window_size,
        mamba_slots=plan.mamba_slots if linear else None,
        state_bytes=plan.state_bytes if linear else 0)
    return engine


# simulated_engine's own keywords, read from its signature (what _check_options lists)
_ENGINE_OPTIONS = tuple(p.name for p in inspect.signature(simulated_engine).parameters.values()
                        if p.kind is inspect.Parameter.KEYWORD_ONLY)


def simulate(requests: Sequence[RequestLike] | RequestFile | str | os.PathLike, *,
             record_page_tables: bool = False, record_pages: bool = False, fast_forward: bool = True,
             **options: Any) -> EngineResult:
    """Run SGLang's scheduler over ``requests`` on the pool SGLang would build:
    ``simulated_engine(**options).run(requests)``.

    Args:
        requests: workload entries (``pagedkv.workloads.synthetic.RequestSpec`` or alike), any
            order; or a requests file (its path, or as
            :func:`pagedkv.workloads.request_files.load_requests` returns it), run at the
            file's ``arrival_s`` less the first one (all at t=0 without them).
        record_page_tables: keep every step's page tables (small pools only).
        record_pages: record every page's owner changes (the visualizer's page events).
        fast_forward: False forces the step-by-step path (the reference the fast path is
            tested against; the results are the same, only slower).
        options: :func:`simulated_engine`'s keyword arguments (``model``, ``gpu``,
            ``page_size``, ``policy``, ``radix_cache``, ... and any :class:`SchedulerConfig`
            field).

    Returns:
        :class:`EngineResult` with the pool's ``plan``; times are modelled by
        :class:`RooflineStepTime`.
    Raises:
        ConfigError: unknown preset, parameter out of range, a request larger than the pool.
        NotEnoughMemoryError: the weights leave no room for a pool.
    """
    engine = simulated_engine(record_pages=record_pages, **options)
    if isinstance(requests, str | os.PathLike):
        requests = load_requests(os.fspath(requests))
    if isinstance(requests, RequestFile):
        times = (relative_arrivals(requests.arrival_s)[0] if requests.arrival_s is not None
                 else np.zeros(len(requests)))
        requests = list(requests.specs(times))
    return engine.run(requests, record_page_tables=record_page_tables, fast_forward=fast_forward)
