"""From a run to view data: every step, event and page survives the encoding; the HBM bar."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.managers import simulate
from pagedkv.workloads.synthetic import uniform
from pagedkv_widgets.encoding import INT_COLUMNS, decode_run, encode_run
from pagedkv_widgets.hbm import SEGMENTS, hbm_layout, hbm_segments
from pagedkv_widgets.page_encoding import encode_pages, owners_at, rows_at


def _run(n: int = 24, page_size: int = 4, pool: int = 400, seed: int = 0, rate: float | None = 25.0,
         version: str = "0.5.23", radix: bool = True, prompt: tuple[int, int] = (8, 20),
         chunk: int | None = None) -> dict:
    """A small run of the real scheduler with both page records: the visualizer's (page
    events) and the full per-step page tables to check it against."""
    specs = uniform(n, prompt, (30, 90), 90, rate=rate, seed=seed)
    options = {} if chunk is None else {"chunked_prefill_size": chunk}
    return simulate(specs, model="llama-3-8b", gpu="h100-sxm-80gb", page_size=page_size,
                    max_total_tokens=pool, sglang_version=version, radix_cache=radix,
                    record_pages=True, record_page_tables=True, new_token_ratio_decay_steps=60,
                    **options).trace.to_dict()


def _check_round_trip(trace: dict) -> dict:
    """Encode through JSON and back; every column, event, row and owner must survive."""
    dec = decode_run(json.loads(json.dumps(encode_run(trace))))
    steps = trace["steps"]
    assert dec["step"] == steps["step"] and dec["kind"] == steps["kind"]
    for name in INT_COLUMNS.values():
        assert dec[name] == [round(v) for v in steps[name]], name
    assert dec["new_token_ratio"] == pytest.approx(steps["new_token_ratio"], abs=5e-4)
    for kind in ("admit", "finish", "retract", "reprefill"):
        assert dec["events"].get(kind, []) == [(e[0], e[2]) for e in trace["events"] if e[1] == kind]
    pe, ch = trace["page_events"], dec["pages"]["changes"]
    assert sorted(zip(ch["step"], ch["page"], ch["owner"], strict=True)) == sorted(
        zip(pe["step"], pe["page"], pe["owner"], strict=True))
    p = trace["meta"]["page_size"]
    for s, rows in enumerate(trace["page_tables"]):
        assert rows_at(dec["pages"], s) == {rid: (n, pages) for rid, n, pages in rows}, s
        owners = owners_at(dec["pages"], s)
        assert int((owners[1:] == -1).sum()) * p == steps["tokens_free"][s]
        assert int((owners[1:] == -2).sum()) * p == steps["tokens_evictable"][s]
        assert int((owners[1:] == -3).sum()) * p == steps["tokens_protected"][s]
    return dec


@pytest.mark.parametrize(("page", "version", "radix", "chunk"),
                         [(4, "0.5.23", True, None), (1, "0.5.23", True, 16), (16, "0.5.9", True, None),
                          (4, "0.5.23", False, 32)])
def test_round_trip_keeps_every_step_row_and_owner(page, version, radix, chunk):
    dec = _check_round_trip(_run(page_size=page, version=version, radix=radix, chunk=chunk,
                                 pool=400 if page < 16 else 512))
    assert dec["pages"]["lifetimes"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 16), page=st.sampled_from([1, 4, 16]), seed=st.integers(0, 10_000),
       burst=st.booleans())
def test_round_trip_of_any_small_run(n, page, seed, burst):
    _check_round_trip(_run(n=n, page_size=page, pool=512, seed=seed, rate=None if burst else 25.0))


def test_a_retraction_is_a_lifetime_that_ends_and_one_that_starts_again():
    dec = decode_run(encode_run(_run()))
    step, rid = dec["events"]["retract"][0]
    lives = [life for life in dec["pages"]["lifetimes"] if life.rid == rid]
    assert len(lives) == 2 and lives[0].end == step
    assert lives[1].start == next(s for s, r in dec["events"]["reprefill"] if r == rid)


def test_inconsistent_records_are_refused():
    trace = _run(n=4)
    record = trace["page_events"]
    record["rows"]["index"][3] += 5  # an entry that skips indices
    with pytest.raises(ValueError, match="skips an index"):
        encode_pages(record, trace["steps"]["kind"], 4)


def test_the_encoding_is_far_smaller_than_the_page_record():
    """Rows imply most owner changes (a page a row gains is its request's own) and token
    counts follow the decode rule, so the encoded pages are a fraction of the record."""
    trace = _run(n=24, page_size=1, pool=2048)
    enc = encode_run(trace)
    assert len(json.dumps(enc["pages"])) < len(json.dumps(trace["page_events"])) / 3


def test_opening_step_is_just_before_the_first_retraction():
    enc = encode_run(_run())
    first = enc["ev"]["retract"][0][0]
    assert enc["open"] == first - 8


def test_hbm_segments_sum_to_the_card_at_every_step():
    trace = _run(page_size=4)
    meta, steps = trace["meta"], trace["steps"]
    layout = hbm_layout(meta)
    assert layout["other"] > 0
    for used, reserved, cached in zip(steps["tokens_used"], steps["tokens_reserved"],
                                      steps["tokens_evictable"], strict=True):
        seg = hbm_segments(layout, meta["cell_size"], used, reserved, cached)
        assert tuple(seg) == SEGMENTS
        assert sum(seg.values()) == meta["gpu_memory_bytes"]
        assert min(seg.values()) >= 0
    assert max(steps["tokens_evictable"]) > 0  # the radix cache's segment is exercised


def test_hbm_reservation_beyond_the_pool_is_clipped_after_what_the_pool_holds():
    layout = {"card": 100, "weights": 30, "other": 20, "pool": 50}
    seg = hbm_segments(layout, cell_size=1, used=30, reserved=30, evictable=10)
    assert seg == {"weights": 30, "other": 20, "kv_used": 30, "kv_cached": 10, "kv_reserved": 10,
                   "kv_free": 0}
    assert np.isclose(sum(seg.values()), layout["card"])
