"""From visualizer settings to a scene: the simulator run a chapter shows, encoded.

A chapter's views draw from one of two runs of ``pagedkv.entrypoints.simulate`` (see
:func:`parts`), never from both:

- the *card* run, at the real scale of the chosen model on the chosen GPU, in pages of the
  chosen size, feeds the HBM bar, the timeline and, where a chapter shows them, the page
  table and the pool map: all four views show this one run at the same step. Its page
  record (``record_pages``) is taken step by step (no fast-forward), so the page ids are the
  ones SGLang's allocator would hand out, in pages of the run's own page size;
- the *teaching* run (chapter 3 only, ``"pool"`` in the code) on a pool small enough to read
  page by page. The teaching pool applies the chosen ``mem_fraction_static`` to a toy card of
  :data:`TOY_CARD_PAGES` units of which :data:`TOY_WEIGHT_PAGES` hold weights, so it has
  ``(floor(f * 100) - 30) * 8`` tokens (440 at f = 0.85) in pages of the chosen size.

Both runs take the scheduler loop from the settings (``loop``: SGLang's default overlap loop,
or the normal loop of ``--disable-overlap-schedule``), passed to the simulator explicitly.

The JavaScript never simulates; it looks scenes up by :func:`scene_keys` (static book) or
receives them from Python (live widget).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import PagedKVError, bad_value
from pagedkv.gpus import get_gpu
from pagedkv.sizing import KVPoolPlan, plan_pool
from pagedkv.workloads.synthetic import RequestSpec, uniform
from pagedkv_widgets.encoding import encode_run
from pagedkv_widgets.run_cache import RunCache

TOY_CARD_PAGES = 100
TOY_WEIGHT_PAGES = 30
CARD_REQUESTS = 120
TEACH_REQUESTS = 24
# The teaching runs last ~150 steps, so new_token_ratio decays over 60 steps instead of
# SGLang's 600 (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS=60, as chapter 5's small example).
TEACH_DECAY_STEPS = 60

Simulate = Callable[..., Any]
# The scheduler loops, as the loop control names them: SGLang's default ``event_loop_overlap``
# and ``event_loop_normal`` (``--disable-overlap-schedule``).
LOOPS = ("overlap", "normal")


@dataclass(frozen=True)
class Settings:
    """One position of the controls; ``model``/``gpu`` are preset names, ``workload`` a
    key of the catalogue's workloads, ``loop`` one of :data:`LOOPS` (default ``"overlap"``,
    SGLang's). Raises ``ConfigError`` for another loop."""

    model: str
    gpu: str
    workload: str
    mem_fraction_static: float
    page_size: int
    loop: str = "overlap"

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise bad_value("loop", self.loop, f"one of {list(LOOPS)}")

    @property
    def disable_overlap_schedule(self) -> bool:
        """SGLang's ``--disable-overlap-schedule`` for this loop."""
        return self.loop == "normal"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, as the JavaScript holds it."""
        return asdict(self)


def scene_keys(s: Settings) -> dict[str, str]:
    """Grid keys of the two runs (the JavaScript ``sceneKeys`` builds the same strings).

    The teaching run does not depend on the model or GPU, so its key leaves them out.
    """
    f = f"{s.mem_fraction_static:.2f}"
    return {
        "card": f"{s.model}|{s.gpu}|{s.workload}|{f}|{s.page_size}|{s.loop}",
        "pool": f"{s.workload}|{f}|{s.page_size}|{s.loop}",
    }


TEACH_TOKENS_PER_TOY_PAGE = 8  # the toy card's unit: teaching pool tokens per toy page


def teaching_pages(mem_fraction_static: float) -> int:
    """Toy-card units of the teaching pool: ``f`` of the toy card minus its weights, at
    least 4."""
    return max(4, math.floor(mem_fraction_static * TOY_CARD_PAGES + 1e-9) - TOY_WEIGHT_PAGES)


def teaching_tokens(mem_fraction_static: float) -> int:
    """Tokens of the teaching pool (the same at every page size: 440 at f = 0.85); it
    holds ``teaching_tokens // page_size`` pages."""
    return teaching_pages(mem_fraction_static) * TEACH_TOKENS_PER_TOY_PAGE


def default_simulate() -> Simulate:
    """``pagedkv.entrypoints.simulate``, imported on first use."""
    from pagedkv.entrypoints import simulate

    return simulate


@dataclass(frozen=True)
class Workload:
    """A workload choice: Poisson arrivals at ``rate`` requests/s (None: all at t = 0).

    Card scale: :data:`CARD_REQUESTS` requests (or the first ``requests`` of them: chapter 9's
    hybrids, whose runs are recorded step by step) of the book's running case, a long-answer chat
    service (:func:`pagedkv.lessons.examples.long_answers_workload`: prompts around 386
    tokens, log-normal outputs with median ~2,340 tokens, ``max_new_tokens`` = output
    length). Runs last thousands of steps, so ``new_token_ratio`` decays to its floor and
    admission over-admits; with a loaded pool ``retract_decode`` acts.

    Teaching scale: :data:`TEACH_REQUESTS` requests sized in *tokens* (prompts 2-8, outputs
    30-90, ``max_new_tokens`` = output length), arriving at ``teaching_rate``: the page
    size changes how many cells a row has and how much of the last page is unused.
    """

    label: str
    rate: float | None
    teaching_rate: float | None
    seed: int = 0
    requests: int = CARD_REQUESTS

    def __post_init__(self) -> None:
        if not (isinstance(self.requests, int) and 1 <= self.requests <= CARD_REQUESTS):
            raise bad_value("requests", self.requests, f"an int in [1, {CARD_REQUESTS}]")

    def card_requests(self) -> list[RequestSpec]:
        """The real-scale requests: the first ``requests`` of the :data:`CARD_REQUESTS`
        (arrival times at 2 requests/s rescaled to ``rate``; ``rate=None``: all at t = 0)."""
        from pagedkv.lessons.examples import long_answers_workload  # the scheduler, lazily

        base = long_answers_workload(2.0, self.seed, n=CARD_REQUESTS)[:self.requests]
        scale = 0.0 if self.rate is None else 2.0 / self.rate
        return [RequestSpec(r.prompt_len, r.output_len, r.max_new_tokens, r.arrival_s * scale)
                for r in base]

    def teaching_requests(self, page_size: int) -> list[RequestSpec]:
        """The teaching-pool requests, in tokens (the same requests at every page size)."""
        del page_size  # the requests do not depend on it: the pages they need do
        specs = uniform(TEACH_REQUESTS, (2, 8), (30, 90), 90, rate=self.teaching_rate,
                        seed=self.seed)
        return [RequestSpec(r.prompt_len, r.output_len, r.output_len, r.arrival_s)
                for r in specs]


@dataclass(frozen=True)
class SceneRunner:
    """Runs and encodes scenes with ``simulate`` (``pagedkv.entrypoints.simulate``'s shape).

    The teaching run always uses ``teaching_model`` on ``teaching_gpu``, capped by
    ``max_total_tokens`` (SGLang's ``--max-total-tokens``) to :func:`teaching_tokens` tokens.
    ``tp``: the tensor-parallel size of models served on more than one GPU (``{preset name:
    tp}``; 1 for the rest): the card run is then one GPU's share, as SGLang sizes each rank.
    """

    simulate: Simulate
    workloads: dict[str, Workload]
    teaching_model: str
    teaching_gpu: str
    tp: dict[str, int] = field(default_factory=dict)
    memo: dict[tuple[str, str, bool], dict[str, Any]] = field(
        default_factory=dict, compare=False, repr=False)
    cache: RunCache | None = field(default=None, compare=False, repr=False)

    def card_setup(self, s: Settings) -> tuple[KVPoolPlan, list[RequestSpec]]:
        """The real-scale run's pool and requests (``plan_pool`` raises
        ``NotEnoughMemoryError`` where the weights leave no pool)."""
        plan = plan_pool(load_model(s.model), gpu=get_gpu(s.gpu), tp=self.tp.get(s.model, 1),
                         mem_fraction_static=s.mem_fraction_static, page_size=s.page_size)
        return plan, self.workloads[s.workload].card_requests()

    def pool_setup(self, s: Settings) -> tuple[KVPoolPlan, list[RequestSpec]]:
        """The teaching run's pool (:func:`teaching_tokens`, in pages of ``s.page_size``)
        and requests."""
        plan = plan_pool(load_model(self.teaching_model), gpu=get_gpu(self.teaching_gpu),
                         mem_fraction_static=s.mem_fraction_static, page_size=s.page_size,
                         max_total_tokens=teaching_tokens(s.mem_fraction_static))
        return plan, self.workloads[s.workload].teaching_requests(s.page_size)

    def setup(self, part: str, s: Settings) -> tuple[KVPoolPlan, list[RequestSpec]]:
        """:meth:`card_setup` or :meth:`pool_setup`."""
        return self.card_setup(s) if part == "card" else self.pool_setup(s)

    def card(self, s: Settings, pages: bool = False) -> dict[str, Any]:
        """The real-scale run, encoded, with its page record if ``pages``.

        The cap on the running batch is SGLang's (the pool's ``max_running_requests``, up
        to 4096) but at most the run's request count: a cap above that never binds, so the
        run is the same, and the scheduler's page table (one row per allowed request, each
        as long as the longest request) shrinks from ~100 MB to ~4 MB; zeroing it was a
        third of a live re-simulation.
        """
        load = self.workloads[s.workload]
        plan, requests = self.card_setup(s)
        result = self.simulate(
            requests, model=s.model, gpu=s.gpu,
            **({"tp": self.tp[s.model]} if self.tp.get(s.model, 1) != 1 else {}),
            mem_fraction_static=s.mem_fraction_static, page_size=s.page_size,
            arrival_rate=load.rate, record_pages=pages,
            max_running_requests=min(plan.max_running_requests, len(requests)),
            disable_overlap_schedule=s.disable_overlap_schedule,
        )
        return encode_run(result.trace.to_dict())

    def pool(self, s: Settings) -> dict[str, Any]:
        """The teaching-pool run, encoded with its page record."""
        load = self.workloads[s.workload]
        result = self.simulate(
            load.teaching_requests(s.page_size), model=self.teaching_model,
            gpu=self.teaching_gpu, mem_fraction_static=s.mem_fraction_static,
            page_size=s.page_size, max_total_tokens=teaching_tokens(s.mem_fraction_static),
            arrival_rate=load.teaching_rate, record_pages=True,
            new_token_ratio_decay_steps=TEACH_DECAY_STEPS,
            disable_overlap_schedule=s.disable_overlap_schedule,
        )
        return encode_run(result.trace.to_dict())

    def run(self, part: str, s: Settings, pages: bool = False) -> dict[str, Any]:
        """``part`` is ``"card"`` (with its page record if ``pages``) or ``"pool"``. A
        setting the simulator refuses (weights that leave no pool, a request larger than the
        pool) gives ``{"error": message}``; :func:`pagedkv_widgets.limits.explained` turns it
        into plain words for the renderer, which greys its views out.

        Runs are deterministic; each is simulated once per runner and kept (a chapter's text
        and its visualizer read the same run), and in :attr:`cache` if the runner has one
        (the next chapter or build reads it from there).
        """
        if not self.has(part, s, pages):
            self.keep(part, s, pages, self.compute(part, s, pages))
        return self.memo[self.memo_key(part, s, pages)]

    def compute(self, part: str, s: Settings, pages: bool = False) -> dict[str, Any]:
        """Simulate and encode the run :meth:`run` returns (nothing read or kept)."""
        try:
            return self.card(s, pages) if part == "card" else self.pool(s)
        except PagedKVError as exc:
            return {"error": str(exc)}

    def has(self, part: str, s: Settings, pages: bool = False) -> bool:
        """Whether the run is in :attr:`memo`, after reading it from :attr:`cache` if there."""
        key = self.memo_key(part, s, pages)
        if key not in self.memo and self.cache is not None:
            found = self.cache.get(self.cache_args(part, s, pages))
            if found is not None:
                self.memo[key] = found
        return key in self.memo

    def keep(self, part: str, s: Settings, pages: bool, run: dict[str, Any]) -> None:
        """Keep ``run`` (what :meth:`compute` gave) in :attr:`memo` and :attr:`cache`."""
        self.memo[self.memo_key(part, s, pages)] = run
        if self.cache is not None:
            self.cache.put(self.cache_args(part, s, pages), run)

    def cache_args(self, part: str, s: Settings, pages: bool = False) -> dict[str, Any]:
        """Everything a run depends on besides the package's source (:mod:`run_cache`
        hashes that): its :meth:`memo_key`, its workload and, for the teaching run, the
        toy card's model and GPU."""
        _, key, record = self.memo_key(part, s, pages)
        args: dict[str, Any] = {"part": part, "key": key, "pages": record,
                                "workload": repr(self.workloads[s.workload])}
        if part == "pool":
            args["teaching"] = [self.teaching_model, self.teaching_gpu]
        elif self.tp.get(s.model, 1) != 1:
            args["tp"] = self.tp[s.model]
        return args

    @staticmethod
    def memo_key(part: str, s: Settings, pages: bool = False) -> tuple[str, str, bool]:
        """Where :meth:`run` keeps the run of ``part`` at ``s`` in :attr:`memo`."""
        return part, scene_keys(s)[part], pages and part == "card"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for worker processes without the runs kept so far (they stay here)."""
        return {k: v for k, v in self.__dict__.items() if k != "memo"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, memo={})


PAGE_VIEWS = frozenset({"pagetable", "pool", "swapool", "slots"})


def parts(config: dict[str, Any]) -> dict[str, bool]:
    """The run a chapter's views draw from, and whether it carries its page record:
    ``{"pool": True}`` for the teaching pool (``config["teaching"]``), else
    ``{"card": shows a page view}``."""
    if config.get("teaching"):
        return {"pool": True}
    return {"card": bool(PAGE_VIEWS & set(config["views"]))}
