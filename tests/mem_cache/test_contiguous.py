"""The contiguous baseline: chapter 2's fragmentation pictures, exactly, and its errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import AllocatorError, ConfigError, OutOfMemoryError
from pagedkv.lessons.contiguous import (
    ContiguousAllocator,
    ExternalFragmentationError,
    Fit,
    next_pow2,
    orca_reservation,
    pow2_reservation,
)


def fragmented_picture() -> ContiguousAllocator:
    """A A A A . . B B B B . . C C C C over 16 slots."""
    c = ContiguousAllocator(16)
    for name, n in (("A", 4), ("x", 2), ("B", 4), ("y", 2), ("C", 4)):
        c.alloc(name, n, used=n if name.isupper() else 0)
    c.free("x")
    c.free("y")
    return c


def test_external_fragmentation_example() -> None:
    c = fragmented_picture()
    assert c.free_runs() == [(4, 2), (10, 2)]
    assert c.free_slots() == 4 and c.largest_free_run() == 2
    assert c.fit(4) is Fit.NO_CONTIGUOUS_RUN
    assert c.alloc("D", 4) is None
    with pytest.raises(ExternalFragmentationError,
                       match=r"cannot reserve 4 contiguous slots: enough free slots in total, "
                             r"but no contiguous run long enough \(4 free, longest run 2\)"):
        c.alloc("D", 4, strict=True)
    with pytest.raises(OutOfMemoryError, match=r"fewer free slots in total"):
        c.alloc("D", 5, strict=True)
    assert c.alloc("D", 2) == 4
    c.check_invariants()


def test_internal_fragmentation_example() -> None:
    c = ContiguousAllocator(16)
    assert c.alloc("A", 8, used=5) == 0
    assert c.slot_labels()[:8] == ["A0", "A1", "A2", "A3", "A4", "A·", "A·", "A·"]
    assert c.reserved_slots() - c.used_slots() == 3
    c.grow("A", 3)
    with pytest.raises(AllocatorError, match=r"would hold 9 tokens in a reservation of 8"):
        c.grow("A")


def test_errors() -> None:
    c = ContiguousAllocator(8)
    c.alloc("A", 2)
    with pytest.raises(AllocatorError, match=r"request 'A' already holds a reservation"):
        c.alloc("A", 2)
    with pytest.raises(AllocatorError, match=r"request 'B' holds no reservation"):
        c.free("B")
    with pytest.raises(ConfigError, match=r"used=3 is invalid; valid: an integer in \[0, 2\]"):
        c.alloc("B", 2, used=3)
    with pytest.raises(ConfigError, match=r"length=0 is invalid"):
        c.fit(0)
    c.runs["A"].used = 5
    with pytest.raises(AllocatorError, match=r"holds 5 of 2"):
        c.check_invariants()


def test_next_pow2() -> None:
    assert [next_pow2(n) for n in (1, 2, 3, 5, 25, 32, 33, 64, 65)] == [1, 2, 4, 8, 32, 32, 64,
                                                                         64, 128]
    with pytest.raises(ConfigError, match=r"n=0 is invalid"):
        next_pow2(0)


def test_orca_reservations_follow_the_vllm_paper() -> None:
    # Section 6.1: Pow2 rounds the OUTPUT (25 -> 32) and keeps the prompt exact, so a 10-token
    # prompt with a 25-token answer reserves 10 + 32 = 42, not next_pow2(35) = 64.
    assert pow2_reservation(10, 25) == orca_reservation("pow2", 10, 25) == 42
    assert pow2_reservation(1000, 600) == 1000 + 1024
    assert pow2_reservation(10, 32) == 42 and pow2_reservation(10, 33) == 10 + 64
    # Rounded past the model's maximum: capped at it (no request can hold more).
    assert pow2_reservation(100, 1100) == 2048
    assert pow2_reservation(3, 5, max_seq_len=10) == 10
    # Max reserves the model's maximum sequence length, 2,048 in the paper, whatever the request.
    assert orca_reservation("max", 10, 25) == orca_reservation("max", 1000, 1000) == 2048
    assert orca_reservation("max", 10, 25, max_seq_len=4096) == 4096
    # Oracle knows the true output length.
    assert orca_reservation("oracle", 10, 25) == 35


def test_orca_reservation_errors() -> None:
    with pytest.raises(ConfigError, match=r"prompt_len \+ output_len=2100 is invalid; valid: "
                                          r"at most max_seq_len=2048"):
        orca_reservation("max", 1500, 600)
    with pytest.raises(ConfigError, match=r"scheme='buddy' is invalid; valid: \"max\" or "
                                          r"\"pow2\" or \"oracle\""):
        orca_reservation("buddy", 1, 1)
    with pytest.raises(ConfigError, match=r"output_len=0 is invalid"):
        pow2_reservation(5, 0)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=30))
def test_random_alloc_free_keeps_invariants(ops) -> None:
    c = ContiguousAllocator(32)
    for i, (is_alloc, n) in enumerate(ops):
        if is_alloc or not c.runs:
            verdict = c.fit(n)
            start = c.alloc(f"r{i}", n)
            assert (start is not None) == (verdict is Fit.OK)
        else:
            c.free(sorted(c.runs)[n % len(c.runs)])
        c.check_invariants()
        assert c.free_slots() + c.reserved_slots() == 32


def test_check_invariants_catches_overlap_and_owner_drift() -> None:
    c = ContiguousAllocator(8)
    c.alloc("A", 4)
    c.alloc("B", 2)
    c.runs["B"].start = 2
    with pytest.raises(AllocatorError, match=r"run of 'B' overlaps another or leaves the pool"):
        c.check_invariants()
    c.runs["B"].start = 4
    c.owner[7] = 0
    with pytest.raises(AllocatorError, match="the owner map disagrees with the runs"):
        c.check_invariants()
