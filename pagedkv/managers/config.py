"""The scheduler's constants, each defaulting to SGLang's, the release followed, and the three
admission policies.

SGLang reads these from environment variables (``python/sglang/srt/environ.py``) and
server arguments (``python/sglang/srt/server_args.py``):

=====================================  ==========================  =======
SGLang name                            field here                  default
=====================================  ==========================  =======
SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION  ``clip_max_new_tokens``     4096
SGLANG_INIT_NEW_TOKEN_RATIO            ``init_new_token_ratio``    0.7
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR      ``min_new_token_ratio_factor``  0.14
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS     ``new_token_ratio_decay_steps``  600
SGLANG_RETRACT_DECODE_STEPS            ``retract_decode_steps``    20
SGLANG_SWA_EVICTION_INTERVAL           ``swa_eviction_interval``   128
``--schedule-conservativeness``        ``schedule_conservativeness``  1.0
``--max-prefill-tokens``               ``max_prefill_tokens``      16384
``--chunked-prefill-size``             ``chunked_prefill_size``    by GPU memory
``--max-running-requests``             ``max_running_requests``    from the pool
``--disable-overlap-schedule``         ``disable_overlap_schedule``  False
SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP  ``disable_consecutive_prefill_overlap``  False
=====================================  ==========================  =======

:meth:`SchedulerConfig.from_env` reads the six environment variables as SGLang does.

Both releases run the overlap loop unless ``--disable-overlap-schedule`` is given: the
field's default is False in 0.5.23 (``arg_groups/fields/schedule.py``) and in 0.5.9
(``server_args.py``), so it is not a :class:`~pagedkv.releases.Release` field (those are the
behaviours that differ); ``tests/reference/test_server_args.py`` reads it from each release's
own ``ServerArgs``. SGLang turns the overlap loop off by itself for set-ups pagedkv does not
model (speculative decoding in most set-ups, pipeline parallelism, mamba's no-buffer cache, ...).

``release`` (or ``sglang_version``, its name) picks the release whose behaviour the scheduler
follows: a :class:`~pagedkv.releases.Release`, 0.5.23 (the newest, the default) or 0.5.9 (the
release the book was first written against). The scheduler reads the fields it needs;
:data:`VERSION_DIFFERENCES` lists each difference with its source, from the same fields.
"""

from __future__ import annotations

import math
import os
from dataclasses import InitVar, dataclass, fields, replace
from enum import Enum

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.releases import DEFAULT_RELEASE, DEFAULT_SGLANG_VERSION, Release, as_release, differences
from pagedkv.server_args import MAX_PREFILL_TOKENS

__all__ = ["DEFAULT_SGLANG_VERSION", "ENV_VARS", "VERSION_DIFFERENCES", "Policy", "SchedulerConfig"]

# Every rule that differs between the releases: (what, 0.5.9, 0.5.23, where in SGLang),
# generated from the fields of :class:`pagedkv.releases.Release`.
VERSION_DIFFERENCES: tuple[tuple[str, str, str, str], ...] = differences()

ENV_VARS: dict[str, str] = {
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "clip_max_new_tokens",
    "SGLANG_INIT_NEW_TOKEN_RATIO": "init_new_token_ratio",
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": "min_new_token_ratio_factor",
    "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": "new_token_ratio_decay_steps",
    "SGLANG_RETRACT_DECODE_STEPS": "retract_decode_steps",
    "SGLANG_SWA_EVICTION_INTERVAL": "swa_eviction_interval",
}


class Policy(str, Enum):
    """How admission sets memory aside for running requests' future tokens.

    - ``sglang``: SGLang's ``PrefillAdder``: each running request reserves
      ``min(max_new_tokens - generated, CLIP) * new_token_ratio``; a newcomer is charged
      ``ceil_to_page(extend_input_len) + min(max_new_tokens, CLIP)``. Optimistic: relies on
      ``retract_decode`` when the guess is wrong.
    - ``reserve_all``: reserve every request's full final footprint,
      ``ceil_to_page(prompt_len + max_new_tokens - 1)`` tokens, as mini-sglang does. Decode
      can then never run out of pages, so it never retracts, but it admits fewer requests.
    - ``no_reserve``: admit on the prompt's pages alone; decode growth is not planned for,
      so retraction does all the work.
    """

    SGLANG = "sglang"
    RESERVE_ALL = "reserve_all"
    NO_RESERVE = "no_reserve"


@dataclass(frozen=True)
class SchedulerConfig:
    """Every knob of the scheduler; defaults are SGLang's (0.5.23 unless ``release``).

    Attributes:
        policy: admission policy, see :class:`Policy`.
        schedule_conservativeness: scales the initial ``new_token_ratio``
            (``--schedule-conservativeness``); > 1 reserves more, < 1 less.
        init_new_token_ratio: SGLANG_INIT_NEW_TOKEN_RATIO (0.7).
        min_new_token_ratio_factor: SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR (0.14): the floor is
            ``init * factor``.
        new_token_ratio_decay_steps: SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS (600): decode steps
            from init to the floor.
        clip_max_new_tokens: SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (4096): the most future
            tokens admission plans for per request.
        retract_decode_steps: SGLANG_RETRACT_DECODE_STEPS (20): tokens per remaining request
            that the post-retraction ratio assumes.
        swa_eviction_interval: SGLANG_SWA_EVICTION_INTERVAL (128, SGLang 0.5.23): on a
            sliding-window hybrid, a decoding request releases the SWA slots of tokens
            that left its window once the window has moved this many tokens past the last
            release.
        max_prefill_tokens: prompt tokens per prefill pass (16384); the first request of a
            pass is exempt.
        chunked_prefill_size: tokens per prefill pass per request before chunking; None
            disables chunking. ``simulate`` defaults it by GPU memory, as SGLang does.
        max_running_requests: cap on the running batch; None: the pool's value.
        decode_log_interval: a "Decode batch" log line every this many decode steps (40).
        cuda_graph_max_bs: the largest decode batch a CUDA graph serves (the log's
            ``cuda graph`` field only); ``simulate`` sets SGLang's default for the GPU.
        disable_overlap_schedule: run the non-overlapped loop (``event_loop_normal``)
            instead of SGLang's default overlap loop (``event_loop_overlap``: one batch in
            flight, its result processed after the next batch is scheduled; see
            :meth:`pagedkv.managers.scheduler.Scheduler.event_loop_overlap`). False by default,
            as in SGLang.
        disable_consecutive_prefill_overlap: in the overlap loop, process a prefill's
            result before launching a prefill that follows it (SGLang's
            ``is_disable_overlap_for_batch``; off by default, as in SGLang).
        release: the SGLang release followed (a :class:`~pagedkv.releases.Release` or its
            name; stored as the :class:`Release`). ``sglang_version`` (init only) names it
            instead and wins when given; afterwards ``sglang_version`` reads
            ``release.name``.
    """

    policy: Policy = Policy.SGLANG
    schedule_conservativeness: float = 1.0
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    clip_max_new_tokens: int = 4096
    retract_decode_steps: int = 20
    swa_eviction_interval: int = 128
    max_prefill_tokens: int = MAX_PREFILL_TOKENS
    chunked_prefill_size: int | None = 8192
    max_running_requests: int | None = None
    decode_log_interval: int = 40
    cuda_graph_max_bs: int = 256
    disable_overlap_schedule: bool = False
    disable_consecutive_prefill_overlap: bool = False
    release: Release = DEFAULT_RELEASE
    sglang_version: InitVar[str | None] = None

    def __post_init__(self, sglang_version: str | None) -> None:
        object.__setattr__(self, "release",
                           as_release(self.release if sglang_version is None else sglang_version))
        try:
            object.__setattr__(self, "policy", Policy(self.policy))
        except ValueError:
            raise bad_value("policy", self.policy, ", ".join(p.value for p in Policy)) from None
        for name in ("schedule_conservativeness", "init_new_token_ratio"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise bad_value(name, value, "a number > 0")
        factor = self.min_new_token_ratio_factor
        if not isinstance(factor, (int, float)) or not 0 <= factor <= 1:  # NaN fails too
            raise bad_value("min_new_token_ratio_factor", factor, "a number in [0, 1]")
        for name in ("new_token_ratio_decay_steps", "clip_max_new_tokens", "max_prefill_tokens",
                     "decode_log_interval", "cuda_graph_max_bs", "swa_eviction_interval"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("retract_decode_steps", self.retract_decode_steps, minimum=0)
        for name in ("disable_overlap_schedule", "disable_consecutive_prefill_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise bad_value(name, getattr(self, name), "True or False")
        if self.chunked_prefill_size is not None:
            check_positive_int("chunked_prefill_size", self.chunked_prefill_size)
        if self.max_running_requests is not None:
            check_positive_int("max_running_requests", self.max_running_requests)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None,
                 **overrides: object) -> SchedulerConfig:
        """A config with the SGLANG_* environment variables applied, then ``overrides``.

        Raises:
            ConfigError: a variable that does not parse, or any value out of range.
        """
        environ = dict(os.environ) if environ is None else environ
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for var, name in ENV_VARS.items():
            if var in environ:
                kind = float if "float" in str(types[name]) else int
                try:
                    values[name] = kind(environ[var])
                except ValueError:
                    raise bad_value(var, environ[var], f"a {kind.__name__}") from None
        return replace(cls(), **{**values, **overrides})

    @property
    def init_ratio(self) -> float:
        """``min(init_new_token_ratio * schedule_conservativeness, 1)`` (SGLang ``Scheduler``)."""
        return min(self.init_new_token_ratio * self.schedule_conservativeness, 1.0)

    @property
    def min_ratio(self) -> float:
        """``min(init_ratio * min_new_token_ratio_factor, 1)``: 0.098 by default."""
        return min(self.init_ratio * self.min_new_token_ratio_factor, 1.0)

    @property
    def ratio_decay(self) -> float:
        """``(init_ratio - min_ratio) / new_token_ratio_decay_steps`` per decode step."""
        return (self.init_ratio - self.min_ratio) / self.new_token_ratio_decay_steps


# ``sglang_version`` is an init-only name for the release; read back, it is the release's
# name. Set after the dataclass is built, so that the init default stays None.
SchedulerConfig.sglang_version = property(  # type: ignore[assignment,method-assign]
    lambda self: self.release.name, doc="The followed release's name (``release.name``).")
