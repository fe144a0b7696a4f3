""":meth:`RequestTable.add_columns` (the compiled core's route for finished requests) keeps
the record :meth:`RequestTable.add` keeps, request by request: the same time columns, totals
and summary, and the same rows to every sink (a dict sink, the CSV file) in the same order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pagedkv.entrypoints.cli_simulate_output import CsvSink
from pagedkv.managers import Scheduler
from pagedkv.managers.req import Req
from pagedkv.managers.trace import TraceMeta
from pagedkv.managers.trace_summary import FinishedColumns, SummaryTrace
from pagedkv.metrics.request_metrics import RequestTable, Row
from pagedkv.workloads.request_rows import RequestFile, RequestFileBuilder
from pagedkv.workloads.synthetic import RequestSpec, sharegpt_like


def columns(reqs: list[Req]) -> FinishedColumns:
    """The fields of finished ``reqs`` as columns, in their order."""
    def ints(name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in reqs], dtype=np.int64)

    def floats(name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in reqs], dtype=np.float64)

    return FinishedColumns(ints("rid"), ints("prompt_len"), ints("generated"), ints("cached_tokens"),
                           ints("num_retractions"), ints("recomputed_tokens"), floats("arrival_s"),
                           floats("queue_s"), floats("first_token_s"), floats("finish_s"),
                           [r.finish_reason for r in reqs])


def source(n: int) -> RequestFile:
    """A requests file of ``n`` one-turn requests, every third in a named conversation."""
    b = RequestFileBuilder("r.jsonl")
    for i, s in enumerate(sharegpt_like(n, seed=3)):
        row: dict[str, object] = {"prompt_len": s.prompt_len, "output_len": s.output_len}
        if i % 3 == 0:
            row["conversation_id"] = f"c{i}"
        b.add(i + 1, row)
    return b.done()


def finished_reqs(n: int) -> list[Req]:
    """``n`` requests run to the end on a pool small enough to retract, in finish order,
    with one-token outputs (no TPOT) among them."""
    rng = np.random.default_rng(3)
    out = np.maximum(1, rng.geometric(1 / 60, n))
    out[::7] = 1
    specs = [RequestSpec(int(p), int(o), int(o + e)) for p, o, e in
             zip(rng.integers(1, 120, n), out, rng.integers(0, 20, n), strict=True)]
    pool = 2 * max(s.prompt_len + s.max_new_tokens for s in specs)
    order: list[int] = []
    trace = SummaryTrace(TraceMeta(pool), on_event=lambda e: order.append(e.rid),
                         event_kinds=frozenset(("finish", "abort")))
    sched = Scheduler(specs, max_total_num_tokens=pool, radix_cache=False, trace=trace)
    sched.run()
    assert sorted(order) == list(range(n))
    assert any(sched.reqs[i].num_retractions for i in order)
    return [sched.reqs[i] for i in order]


def test_columns_keep_the_per_request_record(tmp_path: Path) -> None:
    reqs = finished_reqs(60)
    src = source(60)
    tables, rows, csvs = [], [], []
    for bulk in (False, True):
        got: list[Row] = []
        sink = CsvSink(str(tmp_path / f"{bulk}.csv"))
        table = RequestTable(len(reqs), src, [got.append, sink])
        if bulk:  # in two batches, as the compiled core hands them on between calls
            table.add_columns(columns(reqs[:25]))
            table.add_columns(columns([]))
            table.add_columns(columns(reqs[25:]))
        else:
            for r in reqs:
                table.add(r)
        sink.close()
        tables.append(table)
        rows.append(got)
        csvs.append((tmp_path / f"{bulk}.csv").read_bytes())
    per_request, bulk_table = tables
    assert rows[0] == rows[1] and [type(v) for v in rows[0][7].values()] == \
        [type(v) for v in rows[1][7].values()]
    assert any(r["tpot_s"] is None for r in rows[1]) and any(r["conversation_id"] for r in rows[1])
    assert csvs[0] == csvs[1]
    assert per_request.totals == bulk_table.totals and per_request.count == bulk_table.count == 60
    assert per_request.summary() == bulk_table.summary()
    for name, col in per_request.times.items():
        np.testing.assert_array_equal(col, bulk_table.times[name])


def test_columns_without_a_source_or_sinks() -> None:
    reqs = finished_reqs(60)
    tables = [RequestTable(60), RequestTable(60)]
    for r in reqs:
        tables[0].add(r)
    tables[1].add_columns(columns(reqs))
    assert tables[0].summary() == tables[1].summary()
    assert tables[0].last_finish_s == tables[1].last_finish_s
