"""A compiled step core for long simulated runs, exact to the Python scheduler.

The Python :class:`~pagedkv.managers.scheduler.Scheduler` is the reference (the book shows it;
``tests/reference`` checks it against SGLang's own code). For capacity planning at a million
requests its ~30 Python calls per step dominate, so this package runs the same loop compiled
with numba (``cache=True``: compiled once per machine, in numba's cache beside the modules or,
where that is not writable, in the user-wide cache numba falls back to), for the configuration
capacity planners run: a dense model's one pool, the radix cache on (SGLang's default: matches
at admission, locks, inserts, LRU eviction, requests' token ids or made-up ones) or off,
SGLang's admission policy, both loops (overlap, SGLang's default, and normal), both releases
(their differences passed as ``Release`` fields), any page size, chunked prefill, retraction,
``new_token_ratio``, ignore-EOS requests, arrivals over time and idle jumps, into a
:class:`~pagedkv.managers.trace_summary.SummaryTrace`. Everything else (hybrid models'
pools and caches, the teaching policies, conversations whose turns follow one another, a
full trace) keeps the Python path. ``tests/managers/test_compiled_core.py`` (the radix cache
off) and ``test_compiled_core_radix.py`` (on) are the contract: the same requests' fields,
step count, totals, log lines, events, allocator state and tree as the reference.

Modules: :mod:`.layout` (the state's arrays), :mod:`.pools` (allocator, rows, runs of slots
freed), :mod:`.radix` (the radix tree as arrays), :mod:`.radix_cache` (a request's life on
the tree, and its release), :mod:`.admission` (the prefill pass), :mod:`.decode` (memory
check, retraction, results), :mod:`.loop` (the loop and its totals), :mod:`.runner` (the
Python side).
"""

from __future__ import annotations

import importlib.util


def numba_available() -> bool:
    """Whether numba can be imported (the compiled core needs it)."""
    return importlib.util.find_spec("numba") is not None


CORES = ("auto", "compiled", "reference")
AUTO_MIN_REQUESTS = 50_000  # below this the Python loop takes less than a first compile


def choose_core(sched: object, core: str, *, check: bool = False) -> tuple[bool, str | None]:
    """Whether to run ``sched`` (a fresh :class:`~pagedkv.managers.scheduler.Scheduler`) on
    the compiled core, and a one-line note for the user (None: nothing to say).

    ``core``: ``"reference"``, the Python loop; ``"compiled"``, the compiled core, or the
    Python loop with a note saying why not (numba missing, or a configuration it does not
    cover: :func:`~pagedkv.managers.compiled_core.runner.compiled_core_refusal`);
    ``"auto"``, the compiled core when it applies and the run has at least
    ``AUTO_MIN_REQUESTS`` requests (a first compile takes longer than a short run; numba's
    cache makes later ones quick), with a note if numba is missing then, else the Python loop
    without a note. ``check`` (invariants checked after every step) needs the Python loop.

    Raises:
        ConfigError: ``core`` not one of ``CORES``.
    """
    from pagedkv.errors import bad_value

    if core not in CORES:
        raise bad_value("core", core, f"one of {CORES}")
    if core == "reference":
        return False, None
    why = "invariant checks after every step need it" if check else None
    if why is None:
        from pagedkv.managers.compiled_core.runner import compiled_core_refusal

        why = compiled_core_refusal(sched)  # type: ignore[arg-type]
    if core == "auto":
        if why is not None or len(sched.reqs) < AUTO_MIN_REQUESTS:  # type: ignore[attr-defined]
            return False, None
        if not numba_available():
            return False, ("note: numba is not installed: the Python scheduler runs this long run "
                           "(pip install numba for the compiled core, several times faster)")
        return True, None
    if why is None and not numba_available():
        why = "numba is not installed (pip install numba)"
    if why is not None:
        return False, f"note: the compiled core does not cover this run ({why}): the Python scheduler runs it"
    return True, None
