"""SGLang's answers on the cases where pagedkv once disagreed with it, held here as literals.

Each test builds one small case (the drivers of this folder), runs pagedkv following each
release and requires SGLang's answer, written out below. These run in every interpreter,
so the main test suite holds them too; in a reference venv (``scripts/sglang_reference.sh``)
the same case also runs through the installed SGLang, which must still give the literal (so
the literal is SGLang's answer, not pagedkv's).

The classes of disagreement: a carried chunk's length (``min(rem_chunk_tokens,
int(rem_total_tokens))``, not floored to pages, the whole chunk budget only once that is
<= 0); the running batch's reservation summed request by request in Python's order (not one
product, not numpy's pairwise sum), which decides admissions at an exact boundary; the
newcomer test ``total >= rem_total_tokens``; ties on the retraction key (later batch index
first), victims re-queued and freed in pop order, the kept batch left in sorted order; the
last request that cannot decode (0.5.9 raises, 0.5.23 aborts it); and, page size 1, the
order a free group releases frees made through ``free`` and ``free_page_ids``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import compare
import drive_adder as DA
import drive_alloc as DL
import drive_retract as DR
import numpy as np
import pytest
import sgl_boot

RELEASES = ("0.5.9", "0.5.23")


def _sglang(release: str, module: str) -> ModuleType | None:
    """This folder's SGLang driver ``module`` if this interpreter has SGLang ``release``."""
    if release != sgl_boot.VERSION or sgl_boot.unavailable_reason():
        return None
    sgl_boot.load()
    return importlib.import_module(module)


def _holds(expected: Any, case: dict, pagedkv: Any, sglang: Any) -> None:
    """pagedkv's answer, and SGLang's where installed, equal ``expected``."""
    assert pagedkv(case) == expected, "pagedkv"
    if sglang is not None:
        compare.COUNTS["held answers, checked on SGLang"] += 1
        assert sglang(case) == expected, "SGLang no longer gives the recorded answer"


def _adder(release: str, case: dict, expected: dict) -> None:
    def summary(record: dict) -> dict:
        return {"chunk": record["chunked"][:2] if "chunked" in record else None,
                "initial_rem_total": record["initial"][0],
                "offers": [offer[2] for offer in record["offers"]], "admitted": record["admitted"]}

    module = _sglang(release, "adder_sglang")
    _holds(expected, case, lambda c: summary(DA.run(c, DA.PagedkvAdder)),
           module and (lambda c: summary(DA.run(c, module.SglangAdder))))


def _retract(release: str, case: dict, expected: dict) -> None:
    def summary(record: dict) -> dict:
        return {k: record.get(k) for k in ("retracted", "kept", "ratio", "aborted", "raised", "free")}

    module = _sglang(release, "retract_sglang")
    _holds(expected, case, lambda c: summary(DR.run(c, DR.PagedkvRetract)),
           module and (lambda c: summary(DR.run(c, module.SglangRetract))))


# ----- admission -------------------------------------------------------------------------------
@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("left", "pool", "rem_total", "chunk"),
                         [(3, 6, 10.5, 10), (3, 4, 2.5, 2), (7, 4, 0.5, 20), (11, 4, -1.5, 20)])
def test_chunk_continuation_length(release: str, left: int, pool: int, rem_total: float,
                                   chunk: int) -> None:
    """Page size 4, chunk size 20, a carried chunk with 32 tokens to go; a running request
    reserving ``left * 0.5`` leaves ``rem_total`` as given: the chunk is ``int(rem_total)``
    tokens (10, 2: not floored to pages) or, once that is <= 0, the whole chunk budget."""
    reqs = {"r": DA.request(4, left + 1), "k": DA.request(40, 8, first=100)}
    case = DA.make_case(release, 4, pool, reqs, ratio=0.5, chunk=20, running=("r",), chunked=("k", 8))
    _adder(release, case, {"chunk": (True, chunk), "initial_rem_total": rem_total, "offers": [],
                           "admitted": ["k"]})


def _reservation_case(release: str, ratio: float, left: list[int], available: int) -> dict:
    """Page size 1, tree off: running requests of one prompt token with ``left`` tokens to go
    each, ``available`` free slots, and a newcomer whose test total is exactly 100."""
    reqs = {f"r{i}": DA.request(1, n + 1, first=100 * (i + 1)) for i, n in enumerate(left)}
    reqs["w"] = DA.request(50, 50 if release == "0.5.9" else 49, first=5000)
    running = tuple(f"r{i}" for i in range(len(left)))
    return DA.make_case(release, 1, available + len(left), reqs, ratio=ratio, running=running,
                        waiting=("w",))


@pytest.mark.parametrize("release", RELEASES)
def test_reservation_is_summed_in_python_order_not_pairwise(release: str) -> None:
    """Ten running requests at ratio 0.9: Python's left-to-right sum of the per-request
    products leaves ``rem_total_tokens`` = 100.00000000000006, so a newcomer needing exactly
    100 is admitted; numpy's pairwise sum of the same products gives 100.0 and refuses it."""
    left = [79, 23, 13, 57, 55, 18, 78, 26, 78, 43]
    products = np.array(left) * 0.9
    assert 523 - float(np.sum(products)) == 100.0 != 523 - sum(products.tolist())
    _adder(release, _reservation_case(release, 0.9, left, 523),
           {"chunk": None, "initial_rem_total": 100.00000000000006, "offers": ["NO_TOKEN"],
            "admitted": ["w"]})


@pytest.mark.parametrize("release", RELEASES)
def test_reservation_is_a_sum_of_products_not_one_product(release: str) -> None:
    """Four running requests at ratio 0.7: the sum of per-request products leaves exactly
    100.0, so a newcomer needing 100 is refused; ``0.7 * sum(left)`` would leave
    100.00000000000001 and admit it."""
    left = [45, 23, 50, 62]
    assert 226 - 0.7 * sum(left) != 226 - sum(n * 0.7 for n in left) == 100.0
    _adder(release, _reservation_case(release, 0.7, left, 226),
           {"chunk": None, "initial_rem_total": 100.0, "offers": ["NO_TOKEN"], "admitted": []})


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("max_new", [49, 50])
def test_newcomer_total_equal_to_rem_total_is_refused(release: str, max_new: int) -> None:
    """100 free slots, a prompt of 50: ``50 + max_new`` (0.5.23: ``+ 1`` page of 1 token)
    ``>= rem_total_tokens`` refuses, so 50 + 50 is refused in 0.5.9, 50 + 49 + 1 in 0.5.23."""
    case = DA.make_case(release, 1, 100, {"w": DA.request(50, max_new)}, waiting=("w",))
    refused = release == "0.5.23" or max_new == 50
    _adder(release, case, {"chunk": None, "initial_rem_total": 100.0,
                           "offers": ["NO_TOKEN" if refused else "CONTINUE"],
                           "admitted": [] if refused else ["w"]})


# ----- retraction ------------------------------------------------------------------------------
@pytest.mark.parametrize("release", RELEASES)
def test_retraction_ties_victim_and_kept_order(release: str) -> None:
    """(prompt, max_new, generated) = (10,100,5) (12,100,5) (10,100,5) (10,100,5) (8,100,6),
    one slot short: r1 (fewest outputs, longest prompt) goes; the three exact ties stay, and
    the kept batch is left in sorted order: r4, r0, r2, r3."""
    case = DR.batch_case(release, 1, [(10, 100, 5), (12, 100, 5), (10, 100, 5), (10, 100, 5), (8, 100, 6)])
    _retract(release, case, {"retracted": ["r1"], "kept": ["r4", "r0", "r2", "r3"],
                             "ratio": 0.2518703241895262, "aborted": [], "raised": False,
                             "free": [*range(11, 23), 55, 56, 57, 58]})


@pytest.mark.parametrize("release", RELEASES)
def test_retraction_victims_requeued_and_freed_in_pop_order(release: str) -> None:
    """Five identical requests (2, 100, 1), no free slot: among exact ties the later index
    goes first, r4 then r3, each one's two slots freed as it goes."""
    case = DR.batch_case(release, 1, [(2, 100, 1)] * 5)
    _retract(release, case, {"retracted": ["r4", "r3"], "kept": ["r0", "r1", "r2"],
                             "ratio": 0.20930232558139536, "aborted": [], "raised": False,
                             "free": [9, 10, 7, 8]})


@pytest.mark.parametrize("release", RELEASES)
def test_last_request_that_cannot_decode(release: str) -> None:
    """Page size 4, one request whose next token needs a page, none free."""
    case = DR.batch_case(release, 4, [(4, 10, 1)])
    expected = ({"retracted": [], "kept": ["r0"], "ratio": None, "aborted": [], "raised": True,
                 "free": []} if release == "0.5.9" else
                {"retracted": [], "kept": [], "ratio": 0.0, "aborted": ["r0"], "raised": False,
                 "free": [1]})
    _retract(release, case, expected)


# ----- allocator -------------------------------------------------------------------------------
@pytest.mark.parametrize("release", RELEASES)
def test_page_size_1_free_group_releases_in_call_order(release: str) -> None:
    """Page size 1, three requests of 2, 3 and 4 slots freed in one group (0.5.23: the first
    through ``free_segment``, i.e. ``free_page_ids``): every free goes to the back in call
    order, slots 1..9 after the never-used 10..12."""
    first = "free" if release == "0.5.9" else "segment"
    case = {"page_size": 1, "pool_tokens": 12, "kernels": "torch",
            "steps": [("extend", [("r0", 2, None), ("r1", 3, None), ("r2", 4, None)]),
                      ("free", [("r0", first), ("r1", "free"), ("r2", "split")], True)]}
    module = _sglang(release, "alloc_sglang")
    _holds([10, 11, 12, *range(1, 10)], case, lambda c: DL.run(c, DL.PagedkvPool)[-1]["free"],
           module and (lambda c: DL.run(c, module.SglangPool)[-1]["free"]))


# ----- the scheduler loop ----------------------------------------------------------------------
def test_last_chunk_and_a_newcomer_share_a_pass() -> None:
    """0.5.23, two request rows, chunk size 16: request 0 (20 prompt tokens) is cut at 16;
    in the next pass its last 4 tokens and request 1 (5 tokens) run together. The carried
    chunk still holds its row when the cap is checked (``num_held_rows`` counts rows held by
    the admitted list), so the cap is 2, not 1 (pagedkv once counted the row only while
    ``chunked_req`` was set, which the last chunk clears)."""
    import drive_loop as DO
    import loop_pagedkv

    def request(first: int, n: int) -> DO.LoopRequest:
        return DO.LoopRequest(0, tuple(range(first, first + n)), 3, (100, 101, 102))

    case = DO.LoopCase(page_size=1, pool_tokens=128, radix=False, chunked_prefill_size=16,
                       max_running_requests=2, requests=(request(10, 20), request(40, 5)))

    def summary(records: list) -> list:
        return [(r["mode"], r["rids"], r.get("extend"), r.get("prefix"), r["chunked"])
                for r in records[:3]]

    module = _sglang("0.5.23", "loop_sglang")
    _holds([("EXTEND", [0], [16], [0], 0), ("EXTEND", [0, 1], [4, 5], [16, 0], None),
            ("DECODE", [0, 1], None, None, None)], case,
           lambda c: summary(loop_pagedkv.run(c)), module and (lambda c: summary(module.run(c))))
