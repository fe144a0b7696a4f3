"""What the scheduler records, step by step, in a columnar JSON-able form (simulated and real
runs alike).

:meth:`Trace.to_dict` returns (keys may be added later, never renamed)::

    {"meta": {"model", "gpu", "policy", "sglang_version", "radix_cache", "page_size",
              "mem_fraction_static", "max_total_num_tokens", "cell_size", "num_pages",
              "gpu_memory_bytes", "weights_bytes", "kv_pool_bytes", "arrival_rate"},
     "steps": {"step", "time_s", "kind", "tokens_used", "tokens_reserved", "tokens_free",
               "pages_used", "num_running", "num_waiting", "new_token_ratio",
               "tokens_evictable", "tokens_protected"},
     "events": [[step, "admit"|"chunk"|"finish"|"retract"|"reprefill"|"abort", rid,
                 extra|None], ...],
     "page_tables": None or [per step: [[rid, kv_len, [page ids]], ...]],
     "page_events": None or {"step", "page", "owner", "rows", "lengths", "ahead", "unseen",
                     "overlap", and on a sliding-window hybrid "swa"} (page_recorder),
     "log": [str, ...],
     "log_steps": [int, ...]}

Columns, one entry per step, all read at the end of the step:

- ``time_s``: modeled clock (see :mod:`pagedkv.model_executor.sim_executor`), seconds.
- ``kind``: ``prefill``, ``decode``, or ``idle`` (nothing to run; the clock jumps to the next
  arrival and ``new_token_ratio`` is reset).
- ``tokens_used``: KV tokens the live requests hold (sum of ``kv_len``; a shared prefix
  counts once per request that uses it), the overlap loop's in-flight prefill included.
- ``tokens_reserved``: what admission holds back for the running requests' future tokens
  (ratio-weighted under the ``sglang`` policy).
- ``tokens_free``: the allocator's ``available_size()`` (free pages times page size).
- ``pages_used``: pages handed out (``num_pages - free pages``); partial pages count whole.
- ``num_running``: running requests (plus a request being chunk-prefilled);
  ``num_waiting``: arrived requests in the waiting queue.
- ``tokens_evictable``, ``tokens_protected``: slots the radix cache holds, unlocked (free on
  demand) and locked by running requests. ``tokens_free + tokens_evictable +
  tokens_protected`` plus the requests' own slots is the pool. SGLang's logged ``#token`` is
  ``max_total_num_tokens - tokens_free - tokens_evictable``.

``page_tables[i]`` lists, after step ``i``, each request holding KV as ``[rid, kv_len,
[page ids]]``: ``kv_len`` is the number of tokens whose KV is in the pool, ``seq_len - 1``
between steps (the newest sampled token's KV is written by the next decode step), and page
``k`` of the list holds the request's tokens ``k * page_size .. (k + 1) * page_size - 1``.
Page 0 is never listed (padding page).

Events' ``extra``: ``admit`` / ``reprefill``: ``extend`` (tokens prefilled now) and ``cached``
(tokens served from the radix cache); ``chunk``: ``prefix`` and ``tokens``; ``retract``:
``output_len`` (kept), ``freed`` (KV tokens the request held, to be recomputed) and ``kept``
(those of them the radix cache keeps: its cached prompt prefix); ``finish`` / ``abort``:
``output_len``.

``page_events`` (with ``record_pages``) lists every change of a page's owner: after step
``step``, page ``page`` belongs to request ``owner`` (>= 0), is free (-1), cached and
evictable (-2) or cached and locked by a running request (-3); with the row entries and token
counts that change (``rows``, ``lengths``): see :mod:`pagedkv.managers.page_recorder`. On a
sliding-window hybrid these are the full pool's, and ``swa`` lists the SWA pool's owner changes
(``step``, ``page``, ``owner``).

``log`` holds SGLang-format log lines; ``log_steps[i]`` is the step that printed ``log[i]``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from pagedkv.releases import DEFAULT_SGLANG_VERSION


class StepRow(NamedTuple):
    """One step's row of the trace, read at the end of the step (the columns are described
    in the module docstring; :data:`STEP_COLUMNS` are its field names, in order)."""

    step: int
    time_s: float
    kind: str  # "prefill", "decode" or "idle"
    tokens_used: int
    tokens_reserved: float
    tokens_free: int
    pages_used: int
    num_running: int
    num_waiting: int
    new_token_ratio: float
    tokens_evictable: int
    tokens_protected: int


class Event(NamedTuple):
    """What happened to request ``rid`` at step ``step``: ``kind`` is one of
    :data:`EVENT_KINDS`; ``extra`` its numbers (see the module docstring), or None.
    In :meth:`Trace.to_dict` an event is the list ``[step, kind, rid, extra]``."""

    step: int
    kind: str
    rid: int
    extra: dict[str, int] | None = None


STEP_COLUMNS = StepRow._fields
EVENT_KINDS = ("admit", "chunk", "finish", "retract", "reprefill", "abort")
RETRACT_LINE = "KV cache pool is full"  # how SGLang's retraction log line starts


@dataclass(frozen=True)
class StepTotals:
    """What :class:`~pagedkv.metrics.metrics.Metrics` needs from the steps of a run.

    Attributes:
        num_steps, num_prefill_steps, num_decode_steps, num_idle_steps: step counts.
        chunk_events: ``chunk`` events (one per chunk of a chunked prefill).
        retraction_events: retraction log lines (decode steps that retracted).
        peak_tokens_used: largest ``tokens_used`` of any step (KV tokens of live requests).
        peak_in_use: largest ``max_total_num_tokens - tokens_free - tokens_evictable`` of any
            step: the numerator of SGLang's ``token usage`` (cached tokens no running request
            uses count as free).
        busy_in_use_sum: the same summed over the non-idle steps (tokens x steps).
    """

    num_steps: int = 0
    num_prefill_steps: int = 0
    num_decode_steps: int = 0
    num_idle_steps: int = 0
    chunk_events: int = 0
    retraction_events: int = 0
    peak_tokens_used: int = 0
    peak_in_use: int = 0
    busy_in_use_sum: int = 0


@dataclass(frozen=True)
class TraceMeta:
    """The run's setting. Bytes are bytes; ``arrival_rate`` is requests/s (None: all at t=0);
    on a sliding-window hybrid ``max_total_num_tokens`` and ``cell_size`` are the full pool's;
    ``disable_overlap_schedule``: the loop that ran was SGLang's normal one (``event_loop_normal``,
    ``--disable-overlap-schedule``), not its default overlap loop (``event_loop_overlap``)."""

    max_total_num_tokens: int
    page_size: int = 1
    model: str = "custom"
    gpu: str = "custom"
    policy: str = "sglang"
    sglang_version: str = DEFAULT_SGLANG_VERSION
    radix_cache: bool = True
    mem_fraction_static: float = 0.0
    cell_size: int = 0
    gpu_memory_bytes: int = 0
    weights_bytes: int = 0
    arrival_rate: float | None = None
    disable_overlap_schedule: bool = False
    # a sliding-window hybrid's SWA pool (tokens, bytes per token, the window); None: one pool
    swa_max_total_num_tokens: int | None = None
    swa_cell_size: int = 0
    sliding_window: int | None = None
    # a linear-attention hybrid's state pool (max_mamba_cache_size, one slot's bytes over all
    # linear layers); None: no state slots
    mamba_slots: int | None = None
    state_bytes: int = 0

    @property
    def loop(self) -> str:
        """The SGLang event loop the run followed, in words."""
        return ("normal loop, --disable-overlap-schedule" if self.disable_overlap_schedule
                else "overlap loop")

    @property
    def num_pages(self) -> int:
        """Pages in the pool (page 0, the padding page, not counted)."""
        return self.max_total_num_tokens // self.page_size

    @property
    def kv_pool_bytes(self) -> int:
        """``max_total_num_tokens * cell_size``."""
        return self.max_total_num_tokens * self.cell_size

    def to_dict(self) -> dict[str, Any]:
        """The ``meta`` block of :meth:`Trace.to_dict`; a sliding-window hybrid's also has
        ``swa_max_total_num_tokens``, ``swa_cell_size``, ``sliding_window``,
        ``swa_num_pages`` and ``swa_kv_pool_bytes`` (one pool's has none of them); a
        linear-attention hybrid's ``mamba_slots``, ``state_bytes`` and ``state_pool_bytes``
        (``mamba_slots * state_bytes``, the padding slot not counted, as the pool plan)."""
        swa = ("swa_max_total_num_tokens", "swa_cell_size", "sliding_window")
        out = {k: v for k, v in asdict(self).items()
               if k not in (*swa, "mamba_slots", "state_bytes")}
        out.update(num_pages=self.num_pages, kv_pool_bytes=self.kv_pool_bytes)
        if self.swa_max_total_num_tokens is not None:
            out.update({k: getattr(self, k) for k in swa},
                       swa_num_pages=self.swa_max_total_num_tokens // self.page_size,
                       swa_kv_pool_bytes=self.swa_max_total_num_tokens * self.swa_cell_size)
        if self.mamba_slots is not None:
            out.update(mamba_slots=self.mamba_slots, state_bytes=self.state_bytes,
                       state_pool_bytes=self.mamba_slots * self.state_bytes)
        return out


class Trace:
    """Step columns, events, optional page tables and log lines of one simulation.

    ``records_steps`` and ``keeps_log`` are True: the scheduler fills every column and log (a
    :class:`~pagedkv.managers.trace_summary.SummaryTrace` keeps totals only).
    """

    records_steps = True
    keeps_log = True

    def __init__(self, meta: TraceMeta, record_page_tables: bool = False,
                 page_events: Any = None) -> None:
        self.meta = meta
        self.steps: dict[str, list[Any]] = {name: [] for name in STEP_COLUMNS}
        self._columns = [self.steps[name] for name in STEP_COLUMNS]
        self.events: list[Event] = []
        self.page_tables: list[list[list[Any]]] | None = [] if record_page_tables else None
        self.page_events = page_events  # a PageRecorder, or None
        self.log: list[str] = []
        self.log_steps: list[int] = []

    def __len__(self) -> int:
        return len(self.steps["step"])

    def record_step(self, row: StepRow) -> None:
        """Append one step's row to the columns."""
        for column, value in zip(self._columns, row, strict=True):
            column.append(value)

    def record_event(self, event: Event) -> None:
        """Record an event (its ``kind`` one of :data:`EVENT_KINDS`)."""
        self.events.append(event)

    def add_log(self, step: int, line: str) -> None:
        """Record an SGLang-format log line printed at ``step``."""
        self.log.append(line)
        self.log_steps.append(step)

    def events_of(self, kind: str) -> list[Event]:
        """The events of one kind, in order."""
        return [e for e in self.events if e.kind == kind]

    def totals(self) -> StepTotals:
        """Step counts, peaks and sums over the recorded rows (what ``SummaryTrace`` keeps)."""
        kinds, pool = self.steps["kind"], self.meta.max_total_num_tokens
        in_use = [pool - f - e for f, e in zip(self.steps["tokens_free"],
                                               self.steps["tokens_evictable"], strict=True)]
        busy = [u for k, u in zip(kinds, in_use, strict=True) if k != "idle"]
        return StepTotals(len(kinds), kinds.count("prefill"), kinds.count("decode"),
                          kinds.count("idle"), len(self.events_of("chunk")),
                          sum(line.startswith(RETRACT_LINE) for line in self.log),
                          max(self.steps["tokens_used"], default=0), max(in_use, default=0),
                          sum(busy))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able columnar form described in the module docstring."""
        return {
            "meta": self.meta.to_dict(),
            "steps": {name: list(col) for name, col in self.steps.items()},
            "events": [list(e) for e in self.events],
            "page_tables": self.page_tables,
            "page_events": None if self.page_events is None else self.page_events.to_dict(),
            "log": list(self.log),
            "log_steps": list(self.log_steps),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict())
