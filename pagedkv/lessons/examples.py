"""The runs chapters 4 and 5 of the book are built on, each a named, seeded function.

Everything here drives the real simulator (:func:`~pagedkv.entrypoints.simulate`,
:class:`~pagedkv.managers.Scheduler`); nothing is a hand-written number. Times are the
roofline model of :mod:`pagedkv.model_executor.sim_executor`, not measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pagedkv.entrypoints.engine_outcome import EngineResult
from pagedkv.entrypoints.simulation import simulate
from pagedkv.errors import bad_value
from pagedkv.gpus import get_gpu
from pagedkv.lessons.admission import running_state
from pagedkv.lessons.analysis import RetractionAccounting, first_ratio_jump, retraction_accounting
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler import Scheduler
from pagedkv.metrics.metrics import Metrics
from pagedkv.releases import DEFAULT_SGLANG_VERSION
from pagedkv.workloads.cases import LONG_ANSWERS
from pagedkv.workloads.synthetic import RequestSpec, sharegpt_like, uniform

POLICIES = ("sglang", "reserve_all", "no_reserve")


def exact_budgets(specs: Sequence[RequestSpec]) -> list[RequestSpec]:
    """The same requests with ``max_new_tokens`` equal to each true ``output_len``: a client
    that knows how long its answers are (the worst case for ``new_token_ratio``'s guess)."""
    return [replace(s, max_new_tokens=s.output_len) for s in specs]


TINY_SPECS = (RequestSpec(23, 100, 100), RequestSpec(28, 100, 100), RequestSpec(39, 70, 70),
              RequestSpec(24, 70, 70), RequestSpec(27, 70, 70))


def tiny_retraction_scheduler(radix_cache: bool = True,
                              sglang_version: str = DEFAULT_SGLANG_VERSION,
                              fast_forward: bool = True,
                              disable_overlap_schedule: bool = True) -> Scheduler:
    """Chapter 5's visible example, not yet run: 5 requests arriving at once on a 256-token
    pool in 16 pages of 16, ``max_new_tokens`` = output length, the ratio decaying in 60 steps
    instead of 600 (``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS=60``). Page tables are recorded.
    SGLang's default server (the radix cache on) unless asked otherwise; ``fast_forward=False``
    takes every decode step alone (the same run, step by step).
    ``disable_overlap_schedule``: SGLang's normal loop by default, so that each step's
    result (a token, a finish, a freed page) shows in the step that made it, as the worked
    steps of chapter 5 read it; False runs SGLang's default overlap loop
    (:mod:`pagedkv.lessons.overlap` runs both)."""
    loop = {"disable_overlap_schedule": disable_overlap_schedule}
    return Scheduler(TINY_SPECS, max_total_num_tokens=256, page_size=16, record_page_tables=True,
                     radix_cache=radix_cache, fast_forward=fast_forward,
                     config=SchedulerConfig(new_token_ratio_decay_steps=60,
                                            sglang_version=sglang_version, **loop))


def tiny_retraction_run(radix_cache: bool = True,
                        sglang_version: str = DEFAULT_SGLANG_VERSION) -> Scheduler:
    """:func:`tiny_retraction_scheduler`, run to the end."""
    sched = tiny_retraction_scheduler(radix_cache, sglang_version)
    sched.run()
    return sched


def running_batch(prompt_lens: Sequence[int], generated: Sequence[int],
                  max_new_tokens: Sequence[int], free: int, page_size: int = 1,
                  config: SchedulerConfig | None = None) -> ScheduleBatch:
    """A running batch on real memory: requests that have produced ``generated`` tokens each
    (``kv_len = prompt + generated - 1``) in a pool with exactly ``free`` slots left over
    (radix cache off)."""
    cfg = config or SchedulerConfig()
    reqs = []
    for rid, (p, g, m) in enumerate(zip(prompt_lens, generated, max_new_tokens, strict=True)):
        q = Req(rid, p, m, m)
        q.generated = g
        reqs.append(q)
    held = sum(-(-(p + g - 1) // page_size) * page_size
               for p, g in zip(prompt_lens, generated, strict=True))
    return running_state(reqs, held + free, cfg, page_size)


@dataclass(frozen=True)
class UniformRun:
    """A uniform workload with exact budgets on a capped pool: ``requests`` requests arriving
    at ``rate`` per second (Poisson), prompt and output lengths uniform on the inclusive
    ranges ``prompt`` and ``output`` (tokens), ``max_new_tokens`` equal to each output
    (:func:`exact_budgets`), ``model`` on ``gpu`` with the pool capped at ``pool`` tokens
    (SGLang's ``--max-total-tokens``)."""

    requests: int
    rate: float
    prompt: tuple[int, int]
    output: tuple[int, int]
    pool: int
    model: str = "llama-3-8b"
    gpu: str = "h100-sxm-80gb"
    seed: int = 4

    def specs(self) -> list[RequestSpec]:
        """The seeded requests."""
        return exact_budgets(uniform(self.requests, self.prompt, self.output, self.output[1],
                                     rate=self.rate, seed=self.seed))

    def label(self) -> str:
        """The workload named as the book names it wherever it quotes one of its counts (so a
        count from it is never read as the running case's), e.g. "800-request H100 SXM 80GB
        workload (pool capped at 40,000 tokens)"."""
        return (f"{self.requests:,}-request {get_gpu(self.gpu).label} workload (pool capped at "
                f"{self.pool:,} tokens)")

    def run(self, **options: float) -> EngineResult:
        """:func:`~pagedkv.entrypoints.simulate` of :meth:`specs` (``options``: scheduler settings)."""
        return simulate(self.specs(), model=self.model, gpu=self.gpu, max_total_tokens=self.pool,
                        arrival_rate=self.rate, **options)


# Chapter 4's two runs: long answers (its conservativeness study) and short ones.
LONG_UNIFORM = UniformRun(800, 8.0, (200, 600), (300, 2000), 40_000)
SHORT_UNIFORM = UniformRun(1500, 20.0, (200, 600), (100, 800), 20_000)


def conservativeness_runs(values: Sequence[float] = (0.3, 0.5, 1.0, 1.5)) -> dict[float,
                                                                                    EngineResult]:
    """Chapter 4's run (:data:`LONG_UNIFORM`) at each ``schedule_conservativeness``."""
    return {c: LONG_UNIFORM.run(schedule_conservativeness=c) for c in values}


def conservativeness_retractions(values: Sequence[float] = (0.3, 0.5, 1.0, 1.5)
                                 ) -> dict[float, int]:
    """Retractions of :func:`conservativeness_runs` at each ``schedule_conservativeness``,
    in the order of ``values``: the data behind chapter 4's table and chapter 5's advice."""
    return {c: r.metrics.num_retractions for c, r in conservativeness_runs(values).items()}


def short_answers_run() -> EngineResult:
    """Chapter 4's second workload, :data:`SHORT_UNIFORM`."""
    return SHORT_UNIFORM.run()


def policy_comparison(n: int = 600, rate: float = 30.0, pool: int = 20_000,
                      seed: int = 5) -> dict[tuple[str, str], Metrics]:
    """Chapter 5's three policies on ShareGPT-like requests, with generous budgets (2,048) and
    with exact ones. Keys: ``(clients send, policy)``."""
    generous = sharegpt_like(n, max_new_tokens=2048, rate=rate, seed=seed)
    workloads = {"max_new_tokens 2048": generous, "max_new_tokens = output": exact_budgets(generous)}
    return {(w, p): simulate(specs, model="llama-3-8b", gpu="h100-sxm-80gb",
                             max_total_tokens=pool, policy=p, arrival_rate=rate).metrics
            for w, specs in workloads.items() for p in POLICIES}


def long_answers_workload(rate: float | None, seed: int, n: int = 120) -> list[RequestSpec]:
    """The traffic of the book's running case (:data:`~pagedkv.workloads.cases.LONG_ANSWERS`):
    prompts around 386 tokens, answers with median 2,340 capped at 10,540, ``max_new_tokens``
    = answer length, Poisson arrivals at ``rate`` requests/s (None: all at once)."""
    return LONG_ANSWERS.workload(rate, seed, n)


def observe(rate: float, seed: int, efficiency: float = 1.0, **options: object) -> EngineResult:
    """The running case: Qwen3-4B on an RTX 4090 at ``mem_fraction_static`` 0.80.

    ``efficiency`` in (0, 1] scales the card's peak bandwidth and FLOP/s (step times are a
    roofline; real kernels reach part of the peak). ``options`` go to ``simulate``
    (``radix_cache``, ``sglang_version``, ``page_size``, ...). Raises ConfigError outside
    (0, 1].
    """
    if not 0 < efficiency <= 1:
        raise bad_value("efficiency", efficiency, "(0, 1]")
    card = get_gpu(LONG_ANSWERS.gpu)
    card = replace(card, hbm_bandwidth=card.hbm_bandwidth * efficiency,
                   bf16_flops=card.bf16_flops * efficiency)
    options.setdefault("mem_fraction_static", LONG_ANSWERS.mem_fraction_static)
    return simulate(long_answers_workload(rate, seed), model=LONG_ANSWERS.model, gpu=card,
                    arrival_rate=rate, **options)


@dataclass(frozen=True)
class CaseColumn:
    """One card speed of :func:`case_study`, seeds in order.

    ``first_ratio``: ratio after each seed's first retraction (as logged; seeds that never
    retracted are left out); ``start_ratios``: the ratios those jumps started from;
    ``accounting``: where the victims' tokens went, over all seeds (None: no retraction);
    ``retractions``: per seed; ``calm_retractions``: the light load, first seed.
    """

    efficiency: float
    first_ratio: list[str]
    start_ratios: set[str]
    accounting: RetractionAccounting | None
    retractions: list[int]
    calm_retractions: int


@dataclass(frozen=True)
class CaseStudy:
    """The running case at several card speeds; ``busy`` / ``calm`` are the runs at full speed
    and the first seed (chapter 5 plots them)."""

    columns: list[CaseColumn]
    busy: EngineResult
    calm: EngineResult

    @property
    def start_ratios(self) -> list[str]:
        """Every ratio a first retraction started from, over all columns, sorted."""
        return sorted(set().union(*(c.start_ratios for c in self.columns)))


def case_study(efficiencies: Sequence[float] = (1.0, 0.6, 0.4),
                      seeds: Sequence[int] = (0, 1, 2), busy_rate: float = 2.0,
                      calm_rate: float = 0.35) -> CaseStudy:
    """Run :func:`observe` at ``busy_rate`` for every (efficiency, seed) and at ``calm_rate``
    for the first seed; summarise each efficiency. The first efficiency should be 1.0 (its
    first-seed runs are returned as ``busy`` and ``calm``)."""
    columns, busy, calm = [], None, None
    for eff in efficiencies:
        runs = [observe(busy_rate, seed, eff) for seed in seeds]
        light = observe(calm_rate, seeds[0], eff)
        if busy is None:
            busy, calm = runs[0], light
        jumps = [j for j in (first_ratio_jump(r.trace) for r in runs) if j is not None]
        columns.append(CaseColumn(
            eff, [j[1] for j in jumps], {j[0] for j in jumps},
            retraction_accounting([r.trace for r in runs]),
            [r.metrics.num_retractions for r in runs], light.metrics.num_retractions))
    if busy is None or calm is None:
        raise bad_value("efficiencies", efficiencies, "at least one value")
    return CaseStudy(columns, busy, calm)
