"""A compiled step core for long simulated runs, exact to the Python scheduler.

The Python :class:`~pagedkv.managers.scheduler.Scheduler` is the reference (the book shows it;
``tests/reference`` checks it against SGLang's own code). For capacity planning at a million
requests its ~30 Python calls per step dominate, so this package runs the same loop compiled
with numba (``cache=True``: compiled once per machine, in numba's cache beside the modules or,
where that is not writable, in the user-wide cache numba falls back to), for the configuration
capacity planners run: a dense model's one pool, the radix cache off, SGLang's admission policy,
both loops (overlap, SGLang's default, and normal), both releases (their differences passed as
``Release`` fields), any page size, chunked prefill, retraction, ``new_token_ratio``,
ignore-EOS requests, arrivals over time and idle jumps, into a
:class:`~pagedkv.managers.trace_summary.SummaryTrace`. Everything else keeps the Python path.
``tests/managers/test_compiled_core.py`` is the contract: the same requests' fields, step
count, totals, log lines, events and allocator state as the reference.

Modules: :mod:`.layout` (the state's arrays), :mod:`.pools` (allocator, rows, release),
:mod:`.admission` (the prefill pass), :mod:`.decode` (memory check, retraction, results),
:mod:`.loop` (the loop and its totals), :mod:`.runner` (the Python side).
"""

from __future__ import annotations

import importlib.util


def numba_available() -> bool:
    """Whether numba can be imported (the compiled core needs it)."""
    return importlib.util.find_spec("numba") is not None
