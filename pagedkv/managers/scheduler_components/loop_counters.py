"""The scheduler loop's running totals: the clock, the steps, the tokens decoded.

SGLang keeps its counters on the ``Scheduler`` itself (0.5.23 ``managers/scheduler.py``:
``forward_ct``, ``forward_ct_decode``, ``num_generated_tokens``; the clock is the wall's).
pagedkv's loop has a modelled clock, and the decode step (``DecodeStepRunner``), the memory
check (``DecodeMemoryChecker``) and the fast-forward (``DecodeFastForward``) all move the
counters, so they are one object, shared by the scheduler and the components that move them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pagedkv.errors import PagedKVError


@dataclass(slots=True)
class LoopCounters:
    """Totals since the run began.

    Attributes:
        clock: the modelled time now, in seconds (each pass moves it by its time; an idle
            step moves it to the next arrival).
        num_steps: loop iterations so far (prefill, decode and idle steps).
        num_decode_steps: decode passes launched so far (SGLang's ``forward_ct_decode``).
        decoded: tokens sampled so far, prefill passes' first tokens included.
        num_decode_skips: the overlap loop's decode steps skipped instead of retracting
            (``DecodeMemoryChecker``).
        idle_blocked: idle steps in a row with requests waiting and none running (the
            scheduler stops as stuck after 3).
    """

    clock: float = 0.0
    num_steps: int = 0
    num_decode_steps: int = 0
    decoded: int = 0
    num_decode_skips: int = 0
    idle_blocked: int = 0

    def pass_ran(self, seconds: float) -> None:
        """A pass of ``seconds`` ran: the clock moves on and the loop is not idle."""
        self.clock += seconds
        self.idle_blocked = 0

    def decode_launched(self, bs: int) -> None:
        """A decode pass of ``bs`` requests was prepared: one decode step, ``bs`` tokens."""
        self.num_decode_steps += 1
        self.decoded += bs

    @contextmanager
    def at(self, clock: float) -> Iterator[LoopCounters]:
        """The clock reads ``clock`` (seconds) inside the block and goes back after it: a
        pass's result processed at the pass's end (the overlap loop processes it while the
        next pass runs), so that the requests it finishes finish then."""
        now, self.clock = self.clock, clock
        try:
            yield self
        finally:
            self.clock = now

    def check_invariants(self) -> None:
        """Every count >= 0, the clock finite and >= 0, no more decode steps than steps
        plus one (the overlap loop launches a step's pass before counting the step).

        Raises:
            PagedKVError: one of these is broken.
        """
        counts = (self.num_steps, self.num_decode_steps, self.decoded, self.num_decode_skips,
                  self.idle_blocked)
        if (min(counts) < 0 or not math.isfinite(self.clock) or self.clock < 0
                or self.num_decode_steps > self.num_steps + 1):
            raise PagedKVError(f"loop counters broken: {self}")
