"""Running one case on both sides and reporting where they part, plus the session's tally.

Every area's test does the same thing: build a case from a seed, run it through SGLang's
classes and through pagedkv's, and require identical records. :func:`compare_seeds` does
that for a block of seeds and fails with the first disagreements in full (seed, input, the
first record that differs on each side), so a failure can be replayed on its own.
:data:`COUNTS` tallies the cases compared per area, for the summary line the conftest
prints at the end of the run.
"""

from __future__ import annotations

import pprint
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

COUNTS: Counter[str] = Counter()
SHOWN = 3  # disagreements shown in full per failing block


def first_difference(ours: list[Any], theirs: list[Any]) -> str:
    """The first record (by index) where two runs differ, both versions side by side."""
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return (f"record {i}:\n  SGLang : {pprint.pformat(a, width=100)}\n"
                    f"  pagedkv: {pprint.pformat(b, width=100)}")
    return f"lengths differ: SGLang {len(ours)} records, pagedkv {len(theirs)}"


def compare_seeds(area: str, seeds: Iterable[int], make_case: Callable[[int], Any],
                  sglang: Callable[[Any], list[Any]], pagedkv: Callable[[Any], list[Any]]) -> None:
    """Compare ``sglang(case)`` with ``pagedkv(case)`` for each seed's case; fail listing the
    disagreements (the first :data:`SHOWN` in full)."""
    bad: list[str] = []
    n = 0
    for seed in seeds:
        case = make_case(seed)
        ours, theirs = sglang(case), pagedkv(case)
        n += 1
        if ours != theirs:
            if len(bad) < SHOWN:
                bad.append(f"seed {seed}: case {pprint.pformat(case, width=100, compact=True)}\n"
                           f"{first_difference(ours, theirs)}")
            else:
                bad.append(f"seed {seed}")
    COUNTS[area] += n
    assert not bad, f"{len(bad)} of {n} {area} cases disagree:\n" + "\n\n".join(bad)


def same(area: str, ours: Any, theirs: Any, what: str = "") -> None:
    """One directed comparison: equal answers, counted under ``area``."""
    COUNTS[area] += 1
    assert ours == theirs, f"{what}\n  SGLang : {ours!r}\n  pagedkv: {theirs!r}"
