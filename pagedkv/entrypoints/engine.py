"""``Engine``: one scheduler and one executor, simulated or real; every run returns a trace.

Follows SGLang's ``python/sglang/srt/entrypoints/engine.py`` (``Engine.generate``: prompts in,
outputs out) with the server's processes folded into one loop: a fresh
:class:`~pagedkv.managers.scheduler.Scheduler` per run (its own allocator, request rows and
radix cache) over a long-lived executor:

- :class:`~pagedkv.model_executor.model_runner.ModelRunner`: a Hugging Face model on the paged
  pool. The pool (``max_total_num_tokens``, ``page_size``) is the runner's, sized at load
  time as SGLang sizes it; :meth:`Engine.generate` serves prompts and returns real tokens.
- :class:`~pagedkv.model_executor.sim_executor.SimExecutor`: no tensors, roofline step times;
  give the pool size, and :meth:`Engine.run` a workload (``pagedkv.entrypoints.simulate``
  sizes the pool for a model on a GPU preset and runs this same scheduler).

A real run's trace is the simulator's format (:mod:`pagedkv.managers.trace`): ``time_s`` is
measured seconds of forward passes, and ``meta`` names the model and the device. So the
visualizer, the tables and ``--json`` read either.

Where we simplify: the radix cache does not outlive a run (SGLang's lives as long as the
server); all requests of :meth:`Engine.generate` arrive at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pagedkv.entrypoints.engine_outcome import Clamp, RequestTiming, WallClock, lowered_caps
from pagedkv.errors import bad_value, check_positive_int
from pagedkv.managers.config import DEFAULT_SGLANG_VERSION, SchedulerConfig
from pagedkv.managers.req import Req, RequestLike
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.metrics.metrics import Metrics
from pagedkv.model_executor.forward_batch_info import Executor
from pagedkv.model_executor.hub import checkpoint_kwargs, load_tokenizer
from pagedkv.model_executor.model_runner import ModelRunner
from pagedkv.sizing import gpu_memory_defaults
from pagedkv.units import MiB


@dataclass(frozen=True)
class PromptRequest:
    """One prompt for a real model: its ids, its cap, no known output length.

    Attributes:
        prompt_len: ``len(input_ids)``. max_new_tokens: the cap (SGLang's sampling param).
        input_ids: the prompt's token ids. ignore_eos: run to ``max_new_tokens``.
        output_len: None (the model decides, by EOS); output_ids: empty (filled by the model).
        arrival_s: 0 (all arrive at once).
    """

    prompt_len: int
    max_new_tokens: int
    input_ids: tuple[int, ...]
    ignore_eos: bool = False
    output_len: int | None = None
    output_ids: tuple[int, ...] = ()
    arrival_s: float = 0.0


@dataclass
class EngineResult:
    """A finished run.

    Attributes:
        trace: the step-by-step record (simulated and real runs alike).
        metrics: summary numbers (times are the trace's: measured for a real model).
        requests: the requests in submission order, with their final state.
        config: the scheduler's constants.
        startup_log: SGLang's start-up lines for the pool.
        tokenizer: decodes :attr:`texts` (None: ids only).
        clamps: every request whose ``max_new_tokens`` the scheduler lowered at arrival,
            with the value asked, the value granted and why (:class:`Clamp`).
        timings: per request, wall-clock TTFT, TPOT and end-to-end seconds
            (:class:`RequestTiming`; empty for a run that did not measure them).
    """

    trace: Trace
    metrics: Metrics
    requests: list[Req]
    config: SchedulerConfig
    startup_log: list[str] = field(default_factory=list)
    tokenizer: Any = None
    clamps: list[Clamp] = field(default_factory=list)
    timings: list[RequestTiming] = field(default_factory=list)

    @property
    def outputs(self) -> list[list[int]]:
        """Each request's generated token ids (empty for a simulated run)."""
        return [list(r.output_ids or []) for r in self.requests]

    @property
    def texts(self) -> list[str] | None:
        """The outputs decoded by the tokenizer, or None without one."""
        if self.tokenizer is None:
            return None
        return [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in self.outputs]

    @property
    def log(self) -> list[str]:
        """The start-up lines, then the scheduler's SGLang-format log."""
        return [*self.startup_log, *self.trace.log]


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
        scheduler_options: any :class:`SchedulerConfig` field (``disable_overlap_schedule=True``:
            SGLang's ``--disable-overlap-schedule``, the normal loop); on a GPU
            ``chunked_prefill_size``, ``cuda_graph_max_bs`` and ``max_running_requests``
            default to SGLang's for the card and the pool.

    Raises:
        ConfigError: a pool size missing or at odds with the runner's, a bad option.
    """

    def __init__(self, executor: Executor, *, max_total_num_tokens: int | None = None,
                 page_size: int | None = None, radix_cache: bool = True,
                 sglang_version: str = DEFAULT_SGLANG_VERSION, context_len: int | None = None,
                 record_pages: bool = False, **scheduler_options: Any) -> None:
        self.executor = executor
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
        self.config = SchedulerConfig.from_env(**options, sglang_version=sglang_version)

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
    def _meta(self) -> TraceMeta | None:
        """The trace's ``meta`` for a real model (None: the scheduler's default)."""
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

    def scheduler(self, requests: Sequence[RequestLike]) -> Scheduler:
        """A fresh scheduler over ``requests`` on this engine's executor and pool (step it
        yourself, or call :meth:`run`). ConfigError for a request the pool cannot serve."""
        return Scheduler(requests, max_total_num_tokens=self.max_total_num_tokens,
                         page_size=self.page_size, config=self.config,
                         radix_cache=self.radix_cache, context_len=self.context_len,
                         executor=self.executor, meta=self._meta(),
                         record_pages=self.record_pages)

    def run(self, requests: Sequence[RequestLike], check: bool = False,
            on_step: Callable[[Scheduler], None] | None = None) -> EngineResult:
        """Serve ``requests`` to the end.

        Args:
            requests: the workload.
            check: check every memory invariant after every step
                (``Scheduler.check_invariants``).
            on_step: called with the scheduler after every step (a progress bar reads
                ``sched.reqs`` and ``sched.counters.num_decode_steps``).

        The result's ``clamps`` list each request whose ``max_new_tokens`` was lowered at
        arrival; for a real model, ``timings`` hold wall-clock TTFT/TPOT read after every
        step (a simulated run's latencies are in its trace and metrics).
        """
        sched = self.scheduler(requests)
        lowered = lowered_caps(requests, sched.reqs, self.max_total_num_tokens,
                               self.page_size, self.context_len)
        # wall-clock latencies of real tokens only: a simulated run's times are its trace's,
        # and reading every request after every step would cost O(requests) per step there
        clock = WallClock(len(sched.reqs)) if sched.real_tokens else None
        while sched.step():
            if clock is not None:
                clock.observe(sched.reqs)
            if check:
                sched.check_invariants()
            if on_step is not None:
                on_step(sched)
        if clock is not None:  # the step that ended the run returned False
            clock.observe(sched.reqs)
        runner = self.executor if isinstance(self.executor, ModelRunner) else None
        return EngineResult(sched.trace, Metrics.from_run(sched.reqs, sched.trace), sched.reqs,
                            self.config, list(runner.startup_log) if runner else [],
                            runner.tokenizer if runner else None, lowered,
                            clock.timings(sched.reqs) if clock is not None else [])

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
