"""From a run to view data: every step, event and page survives the encoding; the HBM bar."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.entrypoints import simulate
from pagedkv.workloads.synthetic import uniform
from pagedkv_widgets.encoding import INT_COLUMNS, decode_run, encode_run
from pagedkv_widgets.hbm import SEGMENTS, hbm_layout, hbm_segments
from pagedkv_widgets.in_flight_encoding import ahead_at, unseen_at
from pagedkv_widgets.page_decoding import owners_at, rows_at
from pagedkv_widgets.page_encoding import encode_pages


def _run(n: int = 24, page_size: int = 4, pool: int = 400, seed: int = 0, rate: float | None = 25.0,
         version: str = "0.5.23", radix: bool = True, prompt: tuple[int, int] = (8, 20),
         chunk: int | None = None, overlap: bool = False) -> dict:
    """A small run of the real scheduler with both page records: the visualizer's (page
    events) and the full per-step page tables to check it against."""
    specs = uniform(n, prompt, (30, 90), 90, rate=rate, seed=seed)
    options = {} if chunk is None else {"chunked_prefill_size": chunk}
    return simulate(specs, model="llama-3-8b", gpu="h100-sxm-80gb", page_size=page_size,
                    max_total_tokens=pool, sglang_version=version, radix_cache=radix,
                    record_pages=True, record_page_tables=True, new_token_ratio_decay_steps=60,
                    disable_overlap_schedule=not overlap, **options).trace.to_dict()


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


@pytest.mark.parametrize(("page", "version", "radix", "chunk", "overlap"),
                         [(4, "0.5.23", True, None, False), (1, "0.5.23", True, 16, False),
                          (16, "0.5.9", True, None, False), (4, "0.5.23", False, 32, False),
                          (4, "0.5.23", True, None, True), (1, "0.5.23", True, 16, True),
                          (16, "0.5.9", True, None, True), (4, "0.5.23", False, 32, True)])
def test_round_trip_keeps_every_step_row_and_owner(page, version, radix, chunk, overlap):
    dec = _check_round_trip(_run(page_size=page, version=version, radix=radix, chunk=chunk,
                                 pool=400 if page < 16 else 512, overlap=overlap))
    assert dec["pages"]["lifetimes"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 16), page=st.sampled_from([1, 4, 16]), seed=st.integers(0, 10_000),
       burst=st.booleans(), overlap=st.booleans())
def test_round_trip_of_any_small_run(n, page, seed, burst, overlap):
    _check_round_trip(_run(n=n, page_size=page, pool=512, seed=seed, rate=None if burst else 25.0,
                           overlap=overlap))


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


def _slots_ahead(run_pages: dict, step: int) -> dict[int, list[int]]:
    """``{rid: slot ids}`` allocated ahead after ``step``, read from the decoded record: the
    last ``tokens`` slots of each marked row (page size 1: a page is a slot)."""
    rows = rows_at(run_pages, step)
    return {rid: rows[rid][1][rows[rid][0] - n:] for rid, n in ahead_at(run_pages, step).items()}


def _overlap_run(specs: list, pool: int, page: int, overlap: bool) -> tuple[dict, list, list]:
    """A run stepped one step at a time; what SGLang's state says after each step: the slots
    the batch in flight allocated for requests still holding KV (its ``out_cache_loc``, as
    page ids) and the requests that batch's result will finish."""
    from pagedkv.managers import Scheduler, SchedulerConfig

    s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, record_pages=True,
                  fast_forward=False, config=SchedulerConfig(disable_overlap_schedule=not overlap,
                                                        new_token_ratio_decay_steps=60))
    ahead, flight, unseen = [], [], []
    while s.step():
        if flight:  # the requests the previous step's batch in flight finished
            unseen.append([r.rid for r in flight[-1] if r.finished])
        f = s.in_flight
        now: dict[int, list[int]] = {}
        if f is not None:
            ends = np.cumsum(f.batch.extend_lens).tolist()
            for r, end, n in zip(f.batch.reqs, ends, f.batch.extend_lens.tolist(), strict=True):
                if not r.finished:
                    now[r.rid] = sorted({int(x) // page for x in f.batch.out_cache_loc[end - n:end]})
        ahead.append(now)
        flight.append([r for r in (f.batch.reqs if f is not None else []) if not r.finished])
    unseen.append([])  # nothing is in flight after the last step
    return s.trace.to_dict(), ahead, unseen


def test_slots_allocated_ahead_on_a_literal_run():
    """One request, a 4-token prompt, EOS as its 3rd token, pages of 1 token (slot = page).
    Normal loop: nothing is ever ahead. Overlap loop: the prefill in flight after step 0 has
    allocated slots 1-4; each decode step allocates the next slot (5 after step 1, 6 after
    step 2) before the token that goes there is committed; batch 2 samples EOS, seen at
    step 3 (which also allocated slot 7 and then freed the whole row)."""
    from pagedkv.workloads.synthetic import RequestSpec

    for overlap in (False, True):
        trace, ahead, unseen = _overlap_run([RequestSpec(4, 3, 10)], 64, 1, overlap)
        pages = decode_run(encode_run(trace))["pages"]
        marked = [_slots_ahead(pages, s) for s in range(len(ahead))]
        finished = [unseen_at(pages, s) for s in range(len(ahead))]
        if overlap:
            assert marked == [{0: [1, 2, 3, 4]}, {0: [5]}, {0: [6]}, {}]
            assert finished == [[], [], [0], []]
        else:
            assert marked == [{}, {}, {}] and finished == [[], [], []]
        assert marked == ahead and finished == unseen


@pytest.mark.parametrize(("page", "pool"), [(1, 400), (4, 320), (16, 512)])
def test_slots_ahead_and_unseen_finishes_match_the_batch_in_flight(page, pool):
    """At every step of overlap runs with admissions, chunking-free prefills, finishes and
    retractions: the record marks exactly the pages of the in-flight batch's slots for the
    requests still holding KV, and exactly the requests its result finishes."""
    specs = uniform(24, (8, 20), (30, 90), 90, rate=25.0, seed=2)
    trace, ahead, unseen = _overlap_run(specs, pool, page, True)
    assert any(e[1] == "retract" for e in trace["events"]) or page == 16
    pages = decode_run(json.loads(json.dumps(encode_run(trace))))["pages"]
    for s in range(len(ahead)):
        rows = rows_at(pages, s)  # the pages holding a row's last n slots
        got = {rid: sorted(rows[rid][1][(rows[rid][0] - n) // page:])
               for rid, n in ahead_at(pages, s).items()}
        assert got == ahead[s], s
        assert sorted(unseen_at(pages, s)) == sorted(unseen[s]), s
    assert sum(map(len, unseen)) > 0
