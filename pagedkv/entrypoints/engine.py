"""``Engine``: one scheduler and one executor, simulated or real; every run returns a trace.

Follows SGLang's ``python/sglang/srt/entrypoints/engine.py`` (``Engine.generate``: prompts in,
outputs out) with the server's processes folded into one loop: a fresh
:class:`~pagedkv.managers.scheduler.Scheduler` per run (its own allocator, request rows and
radix cache) over a long-lived executor:

- :class:`~pagedkv.model_executor.model_runner.ModelRunner`: a Hugging Face model on the paged
  pool. The pool (``max_total_num_tokens``, ``page_size``) is the runner's, sized at load
  time as SGLang sizes it; :meth:`Engine.generate` serves prompts and returns real tokens.
- :class:`~pagedkv.model_executor.sim_executor.SimExecutor`: no tensors, roofline step times;
  give the pool size, or let :func:`pagedkv.entrypoints.simulation.simulated_engine` size it
  as SGLang would for a model preset on a GPU preset; :meth:`Engine.run` serves a workload.

Either way :meth:`Engine.run_scheduler` steps the scheduler and returns an
:class:`~pagedkv.entrypoints.engine_outcome.EngineResult` whose trace
(:mod:`pagedkv.managers.trace`; a real run's ``time_s`` is measured) the visualizer, the
tables and ``--json`` read alike.

Where we simplify: the radix cache does not outlive a run (SGLang's lives as long as the
server); all requests of :meth:`Engine.generate` arrive at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pagedkv.entrypoints.engine_outcome import EngineResult, WallClock, lowered_caps
from pagedkv.errors import bad_value, check_positive_int
from pagedkv.managers.compiled_core import CORES, choose_core
from pagedkv.managers.config import DEFAULT_SGLANG_VERSION, SchedulerConfig
from pagedkv.managers.req import RequestLike
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_init import SlidingWindowPools, check_hybrid_release
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.mamba_pool import MambaPool
from pagedkv.metrics.metrics import Metrics
from pagedkv.model_executor.forward_batch_info import Executor
from pagedkv.model_executor.hub import checkpoint_kwargs, load_tokenizer
from pagedkv.model_executor.model_runner import ModelRunner
from pagedkv.sizing import KVPoolPlan, gpu_memory_defaults
from pagedkv.units import MiB


@dataclass(frozen=True)
class PromptRequest:
    """One prompt for a real model: its ids, its cap, no known output length.

    Attributes: ``prompt_len`` (``len(input_ids)``), ``max_new_tokens`` (the cap, SGLang's
    sampling param), ``input_ids``, ``ignore_eos`` (run to the cap), ``output_len`` (None: the
    model decides, by EOS), ``output_ids`` (filled by the model), ``arrival_s`` (0: all at once).
    """

    prompt_len: int
    max_new_tokens: int
    input_ids: tuple[int, ...]
    ignore_eos: bool = False
    output_len: int | None = None
    output_ids: tuple[int, ...] = ()
    arrival_s: float = 0.0


class Engine:
    """Serve requests with SGLang's scheduler on ``executor``.

    Args:
        executor: a :class:`ModelRunner` (real tokens) or a simulated executor.
        max_total_num_tokens, page_size: the pool (taken from a ModelRunner; required for
            any other executor).
        radix_cache: SGLang's prefix cache on (default) or off (``--disable-radix-cache``).
        sglang_version: the release whose scheduler is followed (``"0.5.23"`` or ``"0.5.9"``).
        context_len: the model's context length (default a ModelRunner's).
        record_pages: record page events for the visualizer.
        plan: the KV pool SGLang would build, when the pool was sized as SGLang sizes it
            (default a ModelRunner's); results carry it.
        mamba_pool, swa: a hybrid's state slots or SWA pool (see :class:`Scheduler`).
        core: the loop :meth:`run_scheduler` takes by default: ``"reference"`` (the Python
            scheduler), ``"compiled"`` or ``"auto"`` (see :func:`~pagedkv.managers.
            compiled_core.choose_core`).
        scheduler_options: any :class:`SchedulerConfig` field (``disable_overlap_schedule=True``:
            SGLang's ``--disable-overlap-schedule``, the normal loop); on a GPU
            ``chunked_prefill_size``, ``cuda_graph_max_bs`` and ``max_running_requests``
            default to SGLang's for the card and the pool.

    Raises:
        ConfigError: a pool size missing or at odds with the runner's, a bad option, a
            hybrid under a release whose hybrid scheduler is not modelled
            (:func:`~pagedkv.managers.scheduler_init.check_hybrid_release`).
    """

    def __init__(self, executor: Executor, *, max_total_num_tokens: int | None = None,
                 page_size: int | None = None, radix_cache: bool = True,
                 sglang_version: str = DEFAULT_SGLANG_VERSION, context_len: int | None = None,
                 record_pages: bool = False, plan: KVPoolPlan | None = None,
                 mamba_pool: MambaPool | None = None, swa: SlidingWindowPools | None = None,
                 core: str = "reference", **scheduler_options: Any) -> None:
        if core not in CORES:
            raise bad_value("core", core, f"one of {CORES}")
        self.executor, self.core = executor, core
        runner = executor if isinstance(executor, ModelRunner) else None
        if runner is not None:
            for name, given, own in (("max_total_num_tokens", max_total_num_tokens,
                                      runner.max_total_num_tokens),
                                     ("page_size", page_size, runner.page_size)):
                if given is not None and given != own:
                    raise bad_value(name, given, f"{own} (the ModelRunner's pool) or None")
            max_total_num_tokens, page_size = runner.max_total_num_tokens, runner.page_size
            context_len = context_len or runner.context_len
        if max_total_num_tokens is None:
            raise bad_value("max_total_num_tokens", None, "a pool size in tokens (required "
                            "unless the executor is a ModelRunner)")
        self.max_total_num_tokens = max_total_num_tokens
        self.page_size = page_size or 1
        self.radix_cache, self.context_len, self.record_pages = radix_cache, context_len, record_pages
        options = dict(scheduler_options)
        memory = getattr(runner, "device_memory_bytes", 0)
        if memory:
            chunk, graph_bs = gpu_memory_defaults(memory // MiB, 1, sglang_version)
            options.setdefault("chunked_prefill_size", chunk)
            options.setdefault("cuda_graph_max_bs", graph_bs)
        if runner is not None and runner.plan is not None:
            options.setdefault("max_running_requests", runner.plan.max_running_requests)
        self.plan = plan if runner is None else runner.plan
        self.mamba_pool, self.swa = mamba_pool, swa
        self.config = SchedulerConfig.from_env(**options, sglang_version=sglang_version)
        # a hybrid the release's scheduler is not modelled for is refused here, before any run
        check_hybrid_release(self.config, linear=mamba_pool is not None, swa=swa is not None,
                             radix_cache=radix_cache)
        # the trace's ``meta`` block (None: the scheduler's default); a simulated engine on a
        # preset pool sets its own (``simulated_engine``)
        self.meta: TraceMeta | None = self._runner_meta()

    @classmethod
    def from_pretrained(cls, source: Any, *, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, page_size: int = 1,
                        mem_fraction_static: float | None = None,
                        max_total_tokens: int | None = None, attention_backend: str | None = None,
                        tokenizer: Any = None, seed: int = 0, **engine_options: Any) -> Engine:
        """Load a model (:meth:`ModelRunner.load`) and wrap it in an engine.

        ``tokenizer``: a tokenizer, or None to load one from ``source`` when it names a
        checkpoint (hub id or folder) that has one; random-weight models and folders with
        weights only have none (then prompts are token ids). Other arguments as in
        :meth:`ModelRunner.load` and the class.

        Raises:
            ConfigError: a folder that does not exist or has no ``config.json``, a hub id
                that cannot be had now (the hub unreachable and the id not cached: decided
                at once), and everything :meth:`ModelRunner.load` and the class refuse.
        """
        if tokenizer is None and isinstance(source, str):
            tokenizer = load_tokenizer(source, **checkpoint_kwargs(source))
        runner = ModelRunner.load(source, device=device, dtype=dtype, page_size=page_size,
                                  mem_fraction_static=mem_fraction_static,
                                  max_total_tokens=max_total_tokens,
                                  attention_backend=attention_backend, seed=seed,
                                  tokenizer=tokenizer)
        return cls(runner, **engine_options)

    # ----- running ------------------------------------------------------------------------
    def _runner_meta(self) -> TraceMeta | None:
        """The trace's ``meta`` for a real model (None for any other executor)."""
        runner = self.executor
        if not isinstance(runner, ModelRunner):
            return None
        plan = runner.plan
        device = (torch.cuda.get_device_name(runner.device) if runner.device.type == "cuda"
                  else "cpu")
        k, v = runner.token_to_kv_pool.kv_size_bytes()
        cell = (k + v) // (self.max_total_num_tokens + self.page_size)
        weights = sum(p.numel() * p.element_size() for p in runner.model.parameters())
        return TraceMeta(self.max_total_num_tokens, self.page_size, model=runner.name, gpu=device,
                         policy=self.config.policy.value, sglang_version=self.config.sglang_version,
                         radix_cache=self.radix_cache,
                         disable_overlap_schedule=self.config.disable_overlap_schedule,
                         mem_fraction_static=plan.mem_fraction_static if plan else 0.0,
                         cell_size=int(cell), gpu_memory_bytes=runner.device_memory_bytes,
                         weights_bytes=plan.weights_bytes if plan else weights)

    def scheduler(self, requests: Iterable[RequestLike], *,
                  trace: Trace | SummaryTrace | None = None, record_page_tables: bool = False,
                  fast_forward: bool = True) -> Scheduler:
        """A fresh scheduler over ``requests`` on this engine's executor and pool (for
        :meth:`run_scheduler`, or to step yourself).

        Args:
            requests: the workload, in rid order (an iterator is read once).
            trace: where the run is recorded (default a full :class:`Trace`; a
                :class:`SummaryTrace` keeps totals only, for long runs).
            record_page_tables: keep every step's page tables (small pools only).
            fast_forward: False forces the step-by-step path of quiet decode windows (the
                reference the fast path is tested against: the same run, slower).

        Raises ConfigError for a request the pool cannot serve.
        """
        return Scheduler(requests, max_total_num_tokens=self.max_total_num_tokens,
                         page_size=self.page_size, config=self.config,
                         radix_cache=self.radix_cache, context_len=self.context_len,
                         executor=self.executor, meta=self.meta,
                         record_pages=self.record_pages, record_page_tables=record_page_tables,
                         trace=trace, fast_forward=fast_forward, mamba_pool=self.mamba_pool,
                         swa=self.swa)

    def run(self, requests: Sequence[RequestLike], check: bool = False,
            on_step: Callable[[Scheduler], None] | None = None, *,
            trace: Trace | SummaryTrace | None = None, record_page_tables: bool = False,
            fast_forward: bool = True, interruptible: bool = False) -> EngineResult:
        """Serve ``requests`` to the end: :meth:`scheduler` (``trace``, ``record_page_tables``,
        ``fast_forward``), then :meth:`run_scheduler` (``check``, ``on_step``,
        ``interruptible``). The result's ``clamps`` list each request whose
        ``max_new_tokens`` was lowered at arrival; for a real model, ``timings`` hold
        wall-clock TTFT/TPOT read after every step (a simulated run's latencies are in its
        trace and metrics)."""
        sched = self.scheduler(requests, trace=trace, record_page_tables=record_page_tables,
                               fast_forward=fast_forward)
        return self.run_scheduler(sched, requests, check=check, on_step=on_step,
                                  interruptible=interruptible)

    def run_scheduler(self, sched: Scheduler, requests: Sequence[RequestLike] | None = None, *,
                      check: bool = False, on_step: Callable[[Scheduler], None] | None = None,
                      interruptible: bool = False, core: str | None = None) -> EngineResult:
        """Step ``sched`` (from :meth:`scheduler`) until every request has finished: the one
        loop that drives the scheduler, for both executors.

        Args:
            sched: the scheduler, not yet stepped.
            requests: what was submitted, to report lowered caps (None: none reported).
            check: check every memory invariant after every step.
            on_step: called with the scheduler after every step (a progress bar reads
                ``sched.reqs`` and ``sched.counters.num_decode_steps``).
            interruptible: Ctrl-C (KeyboardInterrupt) ends the run between or inside a step
                instead of propagating; the result then says ``interrupted`` and its metrics
                cover the requests that had finished.
            core: the engine's ``core`` when None; ``"reference"`` (the Python loop, step by
                step), ``"compiled"`` or ``"auto"``: the compiled core
                (:mod:`pagedkv.managers.compiled_core`, exact to the Python loop) where it
                applies (:func:`~pagedkv.managers.compiled_core.choose_core`); it calls
                ``on_step`` every few tens of thousands of steps and is stopped by Ctrl-C
                between them.

        Raises:
            ConfigError: ``core`` not one of ``auto``, ``compiled``, ``reference``.
        """
        lowered = ([] if requests is None else
                   lowered_caps(requests, sched.reqs, self.max_total_num_tokens, self.page_size,
                                self.context_len))
        # wall-clock latencies of real tokens only: a simulated run's times are its trace's,
        # and reading every request after every step would cost O(requests) per step there
        clock = WallClock(len(sched.reqs)) if sched.real_tokens else None
        compiled, note = choose_core(sched, self.core if core is None else core, check=check)
        interrupted = False
        try:
            if compiled:
                from pagedkv.managers.compiled_core.runner import run_compiled

                run_compiled(sched, on_pause=on_step)
                if on_step is not None:
                    on_step(sched)
            for _ in sched.steps():  # after a compiled run: nothing left
                if clock is not None:
                    clock.observe(sched.reqs)
                if check:
                    sched.check_invariants()
                if on_step is not None:
                    on_step(sched)
        except KeyboardInterrupt:
            if not interruptible:
                raise
            interrupted = True
        if clock is not None:  # the step that ended the run returned False
            clock.observe(sched.reqs)
        done = [r for r in sched.reqs if r.finish_s is not None] if interrupted else sched.reqs
        runner = self.executor if isinstance(self.executor, ModelRunner) else None
        return EngineResult(sched.trace, Metrics.from_run(done, sched.trace), sched.reqs,
                            self.config, self.plan,
                            startup_log=list(runner.startup_log) if runner else [],
                            tokenizer=runner.tokenizer if runner else None, clamps=lowered,
                            timings=clock.timings(sched.reqs) if clock is not None else [],
                            interrupted=interrupted, core="compiled" if compiled else "reference",
                            core_note=note)

    def generate(self, prompts: Sequence[str | Sequence[int]],
                 max_new_tokens: int | Sequence[int] = 32, *, ignore_eos: bool = False,
                 check: bool = False,
                 on_step: Callable[[Scheduler], None] | None = None) -> EngineResult:
        """Serve ``prompts`` with the real model: greedy tokens until EOS or the cap.

        Args:
            prompts: token-id lists, or strings when the runner has a tokenizer.
            max_new_tokens: one cap for all, or one per prompt. A cap the context or the
                pool cannot hold is lowered as SGLang lowers it, and the result's
                ``clamps`` say so (asked, granted, why).
            ignore_eos: run every request to its cap.
            check: check the memory invariants after every step.
            on_step: see :meth:`run`.

        Raises:
            ConfigError: a simulated executor (it makes no tokens), an empty or overlong
                prompt, an id outside the vocabulary, text without a tokenizer, a bad cap;
                all before any work.
        """
        runner = self.executor
        if not isinstance(runner, ModelRunner):
            raise bad_value("executor", type(runner).__name__,
                            "a ModelRunner (a simulated executor produces no tokens: use run())")
        if not prompts:
            raise bad_value("prompts", list(prompts), "a non-empty list of prompts")
        caps = ([max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int)
                else list(max_new_tokens))
        if len(caps) != len(prompts):
            raise bad_value("len(max_new_tokens)", len(caps), f"{len(prompts)} (one per prompt)")
        requests = []
        for i, (prompt, cap) in enumerate(zip(prompts, caps, strict=True)):
            check_positive_int(f"max_new_tokens[{i}]", cap)
            if isinstance(prompt, str):
                if runner.tokenizer is None:
                    raise bad_value(f"prompts[{i}]", prompt[:40], "token ids (this model has "
                                    "no tokenizer)")
                prompt = runner.tokenizer(prompt).input_ids
            ids = tuple(int(t) for t in prompt)
            runner.check_prompt(i, ids, cap)
            requests.append(PromptRequest(len(ids), cap, ids, ignore_eos))
        return self.run(requests, check=check, on_step=on_step)
