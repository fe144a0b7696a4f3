"""The scheduler's constants as the book explains them: what each does, why it is there, and
where SGLang sets it. The values are never written here: :func:`constant_rows` reads them
from :class:`pagedkv.managers.config.SchedulerConfig`, whose defaults are SGLang's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from pagedkv.managers.config import ENV_VARS, SchedulerConfig


@dataclass(frozen=True)
class Constant:
    """One of SGLang's scheduler constants.

    Attributes:
        field: the :class:`SchedulerConfig` field that holds its value.
        role: what it does and why it is there, in words (no numbers: they are computed).
        source: where SGLang sets and reads it (0.5.23's paths, 0.5.9's where they differ).
        chapter: the chapter that works it through.
    """

    field: str
    role: str
    source: str
    chapter: int


_ENV = "`python/sglang/srt/environ.py`"
_TRACKER = ("`managers/scheduler_components/new_token_ratio_tracker.py`, `NewTokenRatioTracker` "
            "(0.5.9: `managers/scheduler.py`, `Scheduler.__init__`)")

CONSTANTS: tuple[Constant, ...] = (
    Constant("clip_max_new_tokens",
             "Caps how much of one request's `max_new_tokens` admission counts, for a newcomer "
             "and for each running request. Clients often send a budget as large as the context; "
             "without the cap one such request would hold back room for tokens it rarely writes "
             "and block the queue.",
             f"{_ENV}; `managers/schedule_policy.py`, `CLIP_MAX_NEW_TOKENS`", 4),
    Constant("init_new_token_ratio",
             "The first guess of the share of their remaining budget that running requests will "
             "still write (times `--schedule-conservativeness`, capped at one), and the value an idle "
             "server goes back to. It starts cautious because nothing is known yet.",
             f"{_ENV}; `managers/scheduler_components/new_token_ratio_tracker.py` "
             "(0.5.9: `managers/scheduler.py`)", 4),
    Constant("min_new_token_ratio_factor",
             "The floor of the ratio, as a share of its first value: however long a server runs "
             "without a retraction, admission still reserves that much of every running "
             "request's remaining budget.",
             f"{_ENV}; {_TRACKER}", 4),
    Constant("new_token_ratio_decay_steps",
             "The decode steps without a retraction that take the ratio from its first value down "
             "to its floor, in equal decrements: how long a server needs to turn optimistic again "
             "after a start, an idle moment or a retraction.",
             f"{_ENV}; {_TRACKER}", 4),
    Constant("retract_decode_steps",
             "After a retraction, the tokens each remaining request is assumed to write at least: "
             "added per request to the new ratio, and the free slots `release_req` makes room for "
             "per remaining request, so that the survivors can decode a while before the check "
             "fails again.",
             f"{_ENV}; `managers/schedule_batch.py`, `retract_decode` and `release_req`", 5),
    Constant("swa_eviction_interval",
             "On a sliding-window hybrid, how many tokens a decoding request's window moves past "
             "its last release before the sliding-window slots of the tokens that left it are "
             "freed: releasing in batches spares a free call per request per step, at the cost "
             "of holding up to that many slots more per request, which SGLang counts in the "
             "sliding-window slots a running request may hold.",
             f"{_ENV} (SGLang 0.5.23; 0.5.9 has none, and frees them every "
             "`sliding_window_size` decode steps); `managers/schedule_batch.py`, "
             "`maybe_evict_swa`; `model_executor/pool_configurator.py`", 9),
)

SGLANG_NAME = {v: k for k, v in ENV_VARS.items()}


def constant_rows(config: SchedulerConfig | None = None) -> list[tuple[str, str, str, str, str]]:
    """One row per constant: SGLang's variable, its value in ``config`` (default: SGLang's
    defaults), what it gives, its role and its source.

    Raises:
        KeyError: a constant names a field that is not an environment variable (a bug here).
    """
    cfg = config or SchedulerConfig()
    names = {f.name for f in fields(cfg)}
    gives = {
        "clip_max_new_tokens": "at most this many future tokens counted per request",
        "init_new_token_ratio": f"the ratio starts at {cfg.init_ratio:g}",
        "min_new_token_ratio_factor": (f"floor {cfg.min_new_token_ratio_factor:g} x "
                                       f"{cfg.init_ratio:g} = {cfg.min_ratio:.3f}"),
        "new_token_ratio_decay_steps": f"{cfg.ratio_decay:.6f} less per decode step",
        "retract_decode_steps": "tokens per remaining request",
        "swa_eviction_interval": "tokens of window movement per release of old window slots",
    }
    rows = []
    for c in CONSTANTS:
        if c.field not in names:
            raise KeyError(c.field)
        value = getattr(cfg, c.field)
        rows.append((f"`{SGLANG_NAME[c.field]}`", f"{value:,}" if isinstance(value, int) else f"{value:g}",
                     gives[c.field], f"{c.role} (chapter {c.chapter})", c.source))
    return rows
