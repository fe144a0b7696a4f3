"""Run the scheduler over a long workload: bounded memory, a progress bar, a clean Ctrl-C.

:func:`run_requests` runs an :class:`~pagedkv.entrypoints.engine.Engine`'s scheduler
(:meth:`~pagedkv.entrypoints.engine.Engine.run_scheduler`, the one loop) over a
:class:`~pagedkv.managers.trace_summary.SummaryTrace`, which keeps totals instead of one row
per step; each request's metrics go to a
:class:`~pagedkv.metrics.request_metrics.RequestTable` (and on to its sinks) the moment it
finishes. What grows with the run is the scheduler's own ``Req`` per request (a few hundred
bytes) and one float per request per time column.

A tqdm progress bar (finished requests) appears on standard error once a run has taken
2 seconds, unless ``quiet`` or standard error is not a terminal. Ctrl-C (KeyboardInterrupt)
ends the loop between or inside a step; the result then covers the requests that had
finished and says it was interrupted.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tqdm import tqdm

from pagedkv.entrypoints.engine import Engine
from pagedkv.entrypoints.engine_outcome import CutOutput, cut_outputs
from pagedkv.errors import RequestError
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.trace import Event
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.metrics.metrics import Metrics
from pagedkv.metrics.request_metrics import RequestTable, Row
from pagedkv.workloads.request_rows import RequestFile
from pagedkv.workloads.synthetic import RequestSpec

PROGRESS_DELAY_S = 2.0  # runs shorter than this show no bar


@dataclass
class RunOutcome:
    """One run's results.

    Attributes:
        engine: the engine it ran on (its pool ``plan``, ``config``, ``meta`` and executor).
        table: the finished requests' metrics.
        metrics: the run's step counts and memory figures (over finished requests).
        num_requests: requests submitted.
        interrupted: Ctrl-C stopped it before every request finished.
        wall_s: wall-clock seconds the run took (measured, unlike the modelled times).
        swa_peak_in_use: a sliding-window hybrid's most SWA tokens in use at once (SGLang's
            SWA ``#token``, evictable ones counted as free), after any step; None with one
            pool.
        core: the loop that ran it (``"reference"`` or ``"compiled"``); core_note: why the
            compiled core asked for did not run it (None: nothing to say).
        cut: the requests whose output the arrival clamp cut short (rid order).
    """

    engine: Engine
    table: RequestTable
    metrics: Metrics
    num_requests: int
    interrupted: bool
    wall_s: float
    swa_peak_in_use: int | None = None
    core: str = "reference"
    core_note: str | None = None
    cut: list[CutOutput] = field(default_factory=list)

    def line(self, rid: int) -> int | None:
        """Request ``rid``'s line in its requests file (None without one)."""
        return None if self.table.source is None else int(self.table.source.line[rid])

    def where(self, rid: int) -> str:
        """`` (line N)``: request ``rid``'s place in its requests file ("" without one)."""
        line = self.line(rid)
        return "" if line is None else f" (line {line})"


def run_requests(engine: Engine, specs: Iterable[RequestSpec], num_requests: int, *,
                 source: RequestFile | None = None, sinks: list[Callable[[Row], None]] | None = None,
                 on_log: Callable[[str], None] | None = None, quiet: bool = False,
                 label: str = "requests", core: str | None = None) -> RunOutcome:
    """Simulate ``specs`` (``num_requests`` of them) on ``engine``'s pool.

    Args:
        engine: from :func:`pagedkv.entrypoints.simulation.simulated_engine`.
        specs: the requests, in rid order (an iterator is fine: it is read once).
        num_requests: how many ``specs`` holds.
        source: the requests file they came from, for the per-request table's ``line`` columns.
        sinks: receive each finished request's row (see :class:`RequestTable`).
        on_log: receives each SGLang-format log line as it is printed.
        quiet: no progress bar.
        label: the progress bar's description.
        core: ``"auto"`` (the compiled core for long runs it covers), ``"compiled"`` or
            ``"reference"`` (:meth:`Engine.run_scheduler`); None: the engine's.

    Raises:
        ConfigError: a request SGLang would refuse (see :class:`Scheduler`); with ``source``,
            the message says where the request is in the file.
    """
    table = RequestTable(num_requests, source, sinks)
    sched: Scheduler | None = None

    def on_event(event: Event) -> None:
        if event.kind in ("finish", "abort"):
            table.add(sched.reqs[event.rid])

    start = time.perf_counter()
    trace = SummaryTrace(engine.meta, on_event=on_event, on_log=on_log,
                         event_kinds=frozenset(("finish", "abort")), on_finished=table.add_columns)
    try:
        sched = engine.scheduler(specs, trace=trace)
    except RequestError as exc:
        raise _placed(exc, source) from None
    cut = cut_outputs(sched.reqs, engine.max_total_num_tokens, engine.page_size, engine.context_len)
    bar = tqdm(total=num_requests, unit="req", desc=label, file=sys.stderr, delay=PROGRESS_DELAY_S,
               disable=quiet or not sys.stderr.isatty(), dynamic_ncols=True)
    swa_peak = sched.pool_stats.swa_tokens_in_use()

    _say_if_compiling(sched, engine.core if core is None else core, quiet)

    def on_step(_: Scheduler) -> None:
        nonlocal swa_peak
        if swa_peak is not None:
            swa_peak = max(swa_peak, sched.pool_stats.swa_tokens_in_use() or 0)
        if table.count != bar.n:
            bar.update(table.count - bar.n)

    try:
        result = engine.run_scheduler(sched, on_step=on_step, interruptible=True, core=core)
    finally:
        bar.close()
    return RunOutcome(engine, table, result.metrics, num_requests, result.interrupted,
                      time.perf_counter() - start, swa_peak, result.core, result.core_note, cut)


def _say_if_compiling(sched: Scheduler, core: str, quiet: bool) -> None:
    """One line on standard error before a run whose first step compiles the step core
    (once per machine, about a minute and a half): the wait is said, not silent."""
    if quiet:
        return
    from pagedkv.managers.compiled_core import choose_core

    compiled, _ = choose_core(sched, core)
    if compiled:
        from pagedkv.managers.compiled_core.runner import compiled_core_cached

        if compiled_core_cached() is False:
            print("note: compiling the compiled step core for this machine, once (about a "
                  "minute and a half; later runs start at once)", file=sys.stderr)


def _placed(exc: RequestError, source: RequestFile | None) -> RequestError:
    """``exc`` with the file's line of the request it names (``request 19 (line 21 of
    FILE) prompt_len=...``): a file's reader counts lines, the scheduler request indices."""
    if source is None or exc.rid >= len(source):
        return exc
    return RequestError(exc.rid, f" (line {int(source.line[exc.rid])} of {source.source})"
                                 f"{exc.detail}")
