"""``new_token_ratio``: the share of running requests' remaining tokens admission sets aside.

Follows SGLang 0.5.23's ``managers/scheduler_components/new_token_ratio_tracker.py``
(``NewTokenRatioTracker``; 0.5.9 keeps the same numbers on the ``Scheduler`` itself:
``init_new_token_ratio``, ``min_new_token_ratio``, ``new_token_ratio_decay``). The ratio
starts at ``init``, falls by ``decay`` per decode step that needs no retraction down to
``min``, is set to the retraction estimate after a retraction
(:func:`pagedkv.managers.retract_decode.retract_ratio`), and goes back to ``init`` when
the scheduler idles (when depends on the release: ``Release.reset_ratio_only_when_idle``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pagedkv.errors import PagedKVError, bad_value
from pagedkv.managers.config import SchedulerConfig


@dataclass(slots=True, kw_only=True)
class NewTokenRatioTracker:
    """The scheduler's ``new_token_ratio`` and the three numbers that move it.

    Attributes:
        init: the start and reset value, ``min(SGLANG_INIT_NEW_TOKEN_RATIO *
            schedule_conservativeness, 1)`` (0.7 by default).
        min: the floor, ``min(init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1)`` (0.098).
        decay: the fall per decode step, ``(init - min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``.
        current: the ratio now (SGLang's ``new_token_ratio``).

    Raises:
        ConfigError: a value that is not a finite number in [0, 1] (``decay`` >= 0), or
            ``min`` above ``init``.
    """

    init: float
    min: float
    decay: float
    current: float

    def __post_init__(self) -> None:
        for name in ("init", "min", "current"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:  # NaN fails too
                raise bad_value(name, value, "a number in [0, 1]")
        if not isinstance(self.decay, (int, float)) or not 0.0 <= self.decay < math.inf:
            raise bad_value("decay", self.decay, "a finite number >= 0")
        if self.min > self.init:
            raise bad_value("min", self.min, f"at most init={self.init}")

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> NewTokenRatioTracker:
        """The tracker at its start: ``current = init`` (SGLang ``NewTokenRatioTracker.
        from_config``, reading the same environment variables through ``config``)."""
        return cls(init=config.init_ratio, min=config.min_ratio, decay=config.ratio_decay,
                   current=config.init_ratio)

    def decay_step(self) -> None:
        """One decode step that needed no retraction: ``current = max(current - decay, min)``."""
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        """Back to ``init`` (the scheduler idles)."""
        self.current = self.init

    def set_after_retract(self, ratio: float) -> None:
        """A retraction's estimate becomes the ratio (SGLang assigns it to ``current``).

        Raises:
            ConfigError: ``ratio`` outside [0, 1] or NaN.
        """
        if not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
            raise bad_value("ratio", ratio, "a number in [0, 1]")
        self.current = float(ratio)

    def check_invariants(self) -> None:
        """``0 <= current <= 1`` and ``min <= init`` (``current`` may be below ``min``: a
        retraction's estimate can be).

        Raises:
            PagedKVError: either is broken.
        """
        if not (0.0 <= self.current <= 1.0 and self.min <= self.init):
            raise PagedKVError(f"new_token_ratio tracker broken: current={self.current}, "
                               f"min={self.min}, init={self.init}")
