"""Chapter 5's comparison of SGLang's two loops on the visible example."""

from __future__ import annotations

from pagedkv.lessons.overlap import overlap_comparison


def test_the_overlap_loop_sees_finishes_a_step_late() -> None:
    normal, overlap = overlap_comparison()
    assert (normal.loop, overlap.loop) == ("normal", "overlap")
    # requests 0 and 1 finish together, before any retraction: exactly one step later
    assert normal.finish_steps[:2] == (100, 100) and overlap.finish_steps[:2] == (101, 101)
    assert all(o > n for o, n in zip(overlap.finish_steps, normal.finish_steps, strict=True))
    assert normal.retracted == overlap.retracted == (2,)
    assert normal.skips == overlap.skips == 0
    assert (normal.steps, overlap.steps) == (188, 192)
