"""From trace to view data: encoding round trips, the HBM bar, the page table, the grid."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_fixture import toy_requests, toy_trace

from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.encoding import decode_trace, encode_trace, sample_steps
from pagedkv_widgets.hbm import SEGMENTS, hbm_layout, hbm_segments

requests_st = st.lists(
    st.tuples(st.integers(0, 20), st.integers(1, 40), st.integers(1, 30)), min_size=1, max_size=12
)


def _real(page_size: int, mem_fraction_static: float, record_page_tables: bool) -> dict:
    """A teaching-pool run of the real simulator (llama-3-8b on an H100, capped pool), as
    SGLang 0.5.9 schedules it (its admission over-commits enough to retract here)."""
    runner = make_runner()
    load = CATALOG.workloads["burst"]
    requests = load.teaching_requests(page_size) if record_page_tables else load.card_requests()
    cap = 12 * page_size if record_page_tables else None
    return runner.simulate(requests, model="llama-3-8b", gpu="h100-sxm-80gb",
                           mem_fraction_static=mem_fraction_static, page_size=page_size,
                           max_total_tokens=cap, sglang_version="0.5.9",
                           record_page_tables=record_page_tables).trace.to_dict()


def _trace(page_size: int = 16, num_pages: int = 24, n: int = 10) -> dict:
    return toy_trace(num_pages=num_pages, page_size=page_size,
                     requests=toy_requests(n, page_size, seed=3, spacing=1))


@settings(max_examples=60, deadline=None)
@given(requests=requests_st, page_size=st.sampled_from([1, 4, 16]), num_pages=st.integers(72, 100))
def test_round_trip_keeps_every_step_and_page_id(requests, page_size, num_pages):
    trace = toy_trace(num_pages=num_pages, page_size=page_size, requests=requests)
    enc = json.loads(json.dumps(encode_trace(trace, max_samples=10_000)))
    dec = decode_trace(enc)
    steps = trace["steps"]
    assert dec["step"] == steps["step"]
    for name in ("tokens_used", "tokens_reserved", "pages_used", "num_running", "num_waiting",
                 "kind"):
        assert dec[name] == steps[name], name
    assert dec["new_token_ratio"] == pytest.approx(steps["new_token_ratio"], abs=5e-4)
    want = [sorted((rid, n, pages) for rid, n, pages in rows) for rows in trace["page_tables"]]
    got = [sorted((rid, n, pages) for rid, n, pages in rows) for rows in dec["page_tables"]]
    assert got == want


def test_page_table_cells_are_the_traces_page_ids():
    trace = _trace(page_size=4)
    dec = decode_trace(encode_trace(trace, max_samples=10_000))
    for step, rows in enumerate(trace["page_tables"]):
        cells = {rid: pages for rid, _, pages in dec["page_tables"][step]}
        assert cells == {rid: pages for rid, _, pages in rows}


def test_downsampling_keeps_ends_and_counts_every_event():
    trace = toy_trace(num_pages=400, page_size=16, record_page_tables=False,
                      requests=toy_requests(60, 64, seed=5, spacing=3))
    n = len(trace["steps"]["step"])
    enc = encode_trace(trace, max_samples=50)
    dec = decode_trace(enc)
    assert len(dec["step"]) <= 50 < n
    assert dec["step"][0] == 0 and dec["step"][-1] == n - 1
    for kind in ("admit", "finish", "retract"):
        expected = sum(1 for e in trace["events"] if e[1] == kind)
        assert sum(dec["events"].get(kind, {}).values()) == expected
    assert len(json.dumps(enc)) < 10_000


def test_real_trace_round_trip():
    trace = _real(page_size=16, mem_fraction_static=0.6, record_page_tables=True)
    assert any(e[1] == "retract" for e in trace["events"])
    dec = decode_trace(json.loads(json.dumps(encode_trace(trace, max_samples=10_000))))
    assert dec["tokens_used"] == trace["steps"]["tokens_used"]
    for step, rows in enumerate(trace["page_tables"]):
        cells = {rid: (n, pages) for rid, n, pages in dec["page_tables"][step]}
        assert cells == {rid: (n, list(pages)) for rid, n, pages in rows}


def test_sample_steps_short_run_keeps_all():
    assert sample_steps(5, 10).tolist() == [0, 1, 2, 3, 4]


def test_hbm_segments_sum_to_the_card_at_every_step():
    trace = _real(page_size=1, mem_fraction_static=0.83, record_page_tables=False)
    meta, steps = trace["meta"], trace["steps"]
    layout = hbm_layout(meta)
    assert layout["other"] > 0
    for used, reserved in zip(steps["tokens_used"], steps["tokens_reserved"], strict=True):
        seg = hbm_segments(layout, meta["cell_size"], used, reserved)
        assert tuple(seg) == SEGMENTS
        assert sum(seg.values()) == meta["gpu_memory_bytes"]
        assert min(seg.values()) >= 0


def test_hbm_reservation_beyond_the_pool_is_clipped():
    layout = {"card": 100, "weights": 30, "other": 20, "pool": 50}
    seg = hbm_segments(layout, cell_size=1, used=40, reserved=30)
    assert seg == {"weights": 30, "other": 20, "kv_used": 40, "kv_reserved": 10, "kv_free": 0}
