"""Invariants over random traces: JSON Lines and CSV read the same requests, and every
finished request's metrics add up (TTFT + (n - 1) x TPOT = end-to-end, queueing <= TTFT)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.managers import FixedStepTime, Scheduler, SchedulerConfig
from pagedkv.metrics.request_metrics import RequestTable
from pagedkv.workloads.request_files import load_requests

row = st.fixed_dictionaries(
    {"prompt_len": st.integers(1, 300), "output_len": st.integers(1, 60)},
    optional={"extra_cap": st.integers(0, 40), "ignore_eos": st.booleans(),
              "conversation_id": st.sampled_from(["a", "b", "c"])})


def as_rows(draw_rows: list[dict[str, object]], gaps: list[float]) -> list[dict[str, object]]:
    """Valid rows: caps >= outputs, times in order, later turns long enough to resend."""
    rows, history, t = [], {}, 0.0
    for r, gap in zip(draw_rows, gaps, strict=False):
        out = dict(r)
        if "extra_cap" in out:
            out["max_new_tokens"] = out["output_len"] + out.pop("extra_cap")
        conv = out.get("conversation_id")
        if conv is not None:
            out["prompt_len"] = history.get(conv, 0) + int(out["prompt_len"])
            history[conv] = int(out["prompt_len"]) + int(out["output_len"])
        t += gap
        out["arrival_s"] = round(t, 3)
        rows.append(out)
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=25), st.lists(st.floats(0, 2), min_size=25, max_size=25))
def test_jsonl_and_csv_read_the_same_requests(raw: list[dict[str, object]], gaps: list[float]) -> None:
    rows = as_rows(raw, gaps)
    cols = ["prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos", "conversation_id"]
    with tempfile.TemporaryDirectory() as tmp:
        a_path, b_path = Path(tmp) / "t.jsonl", Path(tmp) / "t.csv"
        a_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        b_path.write_text(",".join(cols) + "\n" + "".join(
            ",".join("" if r.get(c) is None else str(r[c]).lower() if isinstance(r[c], bool)
                     else str(r[c]) for c in cols) + "\n" for r in rows))
        a, b = load_requests(str(a_path)), load_requests(str(b_path))
    for col in ("prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos", "follows",
                "conversation", "turn"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert a.conversation_names == b.conversation_names


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=25), st.lists(st.floats(0, 0.2), min_size=25, max_size=25),
       st.sampled_from([1, 4, 16]), st.booleans(), st.booleans())
def test_per_request_metrics_add_up(raw: list[dict[str, object]], gaps: list[float], page: int,
                                    radix: bool, overlap: bool) -> None:
    """In both loops (the overlap loop times a result at the end of the pass that made it,
    not of the pass launched before it was processed)."""
    rows = as_rows(raw, gaps)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        trace = load_requests(str(path))
    pool = 64 * (-(-max(int(p) + 80 for p in trace.prompt_len) // 64)) * 4
    s = Scheduler(trace.specs(trace.arrival_s), max_total_num_tokens=pool, page_size=page,
                  radix_cache=radix, step_time=FixedStepTime(0.01),
                  config=SchedulerConfig(disable_overlap_schedule=not overlap))
    s.run()
    table = RequestTable(len(trace), trace)
    for r in s.reqs:
        table.add(r)
    for r in s.reqs:
        m = table.row(r)
        assert 0 <= m["queue_s"] <= m["ttft_s"] + 1e-12 <= m["e2e_s"] + 2e-12
        if m["tpot_s"] is not None:
            assert m["ttft_s"] + (m["output_len"] - 1) * m["tpot_s"] == pytest.approx(m["e2e_s"])
            assert m["tpot_s"] >= 0.01 - 1e-12  # at least one 10 ms step between tokens
        if r.follows is not None:  # sent once the turn before had answered
            assert m["arrival_s"] >= s.reqs[r.follows].finish_s
    assert table.summary()["completed"] == len(trace)
