"""``Req``'s checks at construction: its one-test path for plain values refuses exactly what
the field-by-field checks (``Req._check``) refuse, with the same message."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import ConfigError
from pagedkv.managers.req import Req

LENGTHS = st.one_of(st.integers(-2, 6), st.booleans(), st.just(2.0), st.builds(np.int64, st.integers(0, 6)))
TIMES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-1, 3), st.just(True))


def outcome(fn: object) -> str | None:
    """The ConfigError message ``fn()`` raises (None: none)."""
    try:
        fn()  # type: ignore[operator]
    except ConfigError as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None)
@given(LENGTHS, st.one_of(st.none(), LENGTHS), LENGTHS, TIMES,
       st.one_of(st.none(), st.integers(0, 6)))
def test_construction_refuses_what_the_field_checks_refuse(prompt: object, out: object, cap: object,
                                                            t: object, ids: int | None) -> None:
    input_ids = None if ids is None else np.zeros(ids, dtype=np.int64)
    bare = object.__new__(Req)
    bare.prompt_len, bare.output_len, bare.max_new_tokens = prompt, out, cap
    bare.arrival_s, bare.input_ids = t, input_ids
    expected = outcome(bare._check)
    got = outcome(lambda: Req(0, prompt, out, cap, t, input_ids=input_ids))  # type: ignore[arg-type]
    assert got == expected


def test_a_plain_request_passes_and_keeps_its_arrival_as_enqueued() -> None:
    r = Req(3, 5, 2, 4, 1.5)
    assert (r.enqueued_s, r._prefix_slots) == (1.5, None)
    with pytest.raises(ConfigError, match="arrival_s"):
        Req(3, 5, 2, 4, math.inf)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        Req(3, 5, 2, 1, 0.0)
