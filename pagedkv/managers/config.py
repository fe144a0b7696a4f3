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
``--schedule-conservativeness``        ``schedule_conservativeness``  1.0
``--max-prefill-tokens``               ``max_prefill_tokens``      16384
``--chunked-prefill-size``             ``chunked_prefill_size``    by GPU memory
``--max-running-requests``             ``max_running_requests``    from the pool
=====================================  ==========================  =======

:meth:`SchedulerConfig.from_env` reads the five environment variables as SGLang does.

``sglang_version`` picks the release whose behaviour the scheduler follows: ``"0.5.23"`` (the
newest, the default) or ``"0.5.9"`` (the release the book was first written against). Only
what differs between them on these code paths is switched; :data:`VERSION_DIFFERENCES` lists
each difference with its source, and the book's table of changes is computed from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from enum import Enum

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.releases import DEFAULT_SGLANG_VERSION, check_sglang_version

# What pagedkv switches on ``sglang_version``: (what, 0.5.9, 0.5.23, where in 0.5.23).
VERSION_DIFFERENCES: tuple[tuple[str, str, str, str], ...] = (
    ("admission charge per request", "extend + min(max_new, CLIP)",
     "extend + min(max_new, CLIP) + page_size", "mem_cache/prefill_budget.py: PrefillBudget.reserve"),
    ("reservation of a running ignore-EOS request", "ratio new_token_ratio", "ratio 1.0",
     "managers/schedule_policy.py: _get_running_request_total_token_offset"),
    ("max_prefill_tokens", "checked always (before and after the prefix lock)",
     "checked only without chunked prefill", "managers/schedule_policy.py: add_one_req"),
    ("prefill log #new-token", "page-rounded extend", "raw extend",
     "managers/schedule_policy.py: _update_prefill_budget"),
    ("finished requests leave the running batch", "at the next decode step", "every step",
     "managers/scheduler.py: get_next_batch_to_run"),
    ("batch_is_full after NO_TOKEN", "always", "only if something is admitted or running",
     "managers/scheduler.py: _get_new_batch_prefill_raw"),
    ("eviction when the free list is short", "evict the whole amount asked for",
     "evict until enough is free", "mem_cache/allocator/base.py: evict_to_free_tokens"),
    ("freed pages (page_size > 1)", "sorted page ids (free)", "row order (free_segment)",
     "mem_cache/allocator/paged.py: free_segment"),
    ("cached prompt + output", "one node", "split at the prompt boundary",
     "mem_cache/unified_radix_cache.py: checkpoint_into_tree"),
    ("waiting prefixes under FCFS", "untouched", "refreshed (LRU) every 32 passes",
     "managers/schedule_policy.py: _touch_waiting_prefixes"),
    ("last request cannot decode", "ValueError", "aborted",
     "managers/schedule_batch.py: retract_decode"),
    ("new_token_ratio reset", "every step without a batch", "only when fully idle",
     "managers/scheduler.py: on_idle"),
    ("chunked_prefill_size, 20-35 GiB GPUs", "2048", "4096",
     "server_args / arg_groups/memory_hook.py"),
)

ENV_VARS: dict[str, str] = {
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "clip_max_new_tokens",
    "SGLANG_INIT_NEW_TOKEN_RATIO": "init_new_token_ratio",
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": "min_new_token_ratio_factor",
    "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": "new_token_ratio_decay_steps",
    "SGLANG_RETRACT_DECODE_STEPS": "retract_decode_steps",
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
    """Every knob of the scheduler; defaults are SGLang's (0.5.23 unless ``sglang_version``).

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
        max_prefill_tokens: prompt tokens per prefill pass (16384); the first request of a
            pass is exempt.
        chunked_prefill_size: tokens per prefill pass per request before chunking; None
            disables chunking. ``simulate`` defaults it by GPU memory, as SGLang does.
        max_running_requests: cap on the running batch; None: the pool's value.
        decode_log_interval: a "Decode batch" log line every this many decode steps (40).
        cuda_graph_max_bs: the largest decode batch a CUDA graph serves (the log's
            ``cuda graph`` field only); ``simulate`` sets SGLang's default for the GPU.
        sglang_version: the SGLang release followed, ``"0.5.23"`` or ``"0.5.9"``.
    """

    policy: Policy = Policy.SGLANG
    schedule_conservativeness: float = 1.0
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    clip_max_new_tokens: int = 4096
    retract_decode_steps: int = 20
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int | None = 8192
    max_running_requests: int | None = None
    decode_log_interval: int = 40
    cuda_graph_max_bs: int = 256
    sglang_version: str = DEFAULT_SGLANG_VERSION

    def __post_init__(self) -> None:
        check_sglang_version(self.sglang_version)
        try:
            object.__setattr__(self, "policy", Policy(self.policy))
        except ValueError:
            raise bad_value("policy", self.policy, ", ".join(p.value for p in Policy)) from None
        for name in ("schedule_conservativeness", "init_new_token_ratio"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise bad_value(name, value, "a number > 0")
        factor = self.min_new_token_ratio_factor
        if not isinstance(factor, (int, float)) or not 0 <= factor <= 1:
            raise bad_value("min_new_token_ratio_factor", factor, "a number in [0, 1]")
        for name in ("new_token_ratio_decay_steps", "clip_max_new_tokens", "max_prefill_tokens",
                     "decode_log_interval", "cuda_graph_max_bs"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("retract_decode_steps", self.retract_decode_steps, minimum=0)
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
