"""One decode step worked through at page size 16: ``check_decode_mem`` (evicting first),
``retract_decode`` if the step still does not fit, then ``prepare_for_decode`` (which evicts
room for a page per request before it takes the step's slots), each stage's numbers read from
the scheduler's own objects.

The step is the first retraction of chapter 5's small run
(:func:`pagedkv.lessons.examples.tiny_retraction_run`). :func:`worked_decode_step` replays
that run to the step, then takes the step's memory decisions in the order
``Scheduler.update_running_batch`` takes them, reading the allocator and the radix cache
between them. Source: SGLang 0.5.23 ``managers/scheduler.py``, ``update_running_batch``;
``managers/schedule_batch.py``, ``check_decode_mem``, ``retract_decode``, ``release_req``;
``mem_cache/allocation.py``, ``alloc_for_decode`` and ``alloc_paged_token_slots_decode``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.errors import bad_value
from pagedkv.lessons.examples import tiny_retraction_run, tiny_retraction_scheduler
from pagedkv.managers.scheduler import Scheduler


@dataclass(frozen=True)
class Stage:
    """The pool after one stage of the step: free slots, evictable tokens in the radix cache,
    and the slots the (remaining) batch's next decode needs."""

    name: str
    free: int
    evictable: int
    need: int
    note: str


@dataclass(frozen=True)
class WorkedDecodeStep:
    """What :func:`worked_decode_step` read.

    Attributes:
        step: the step's number in the run. page_size: tokens per page.
        rows: ``(rid, prompt_len, outputs, kv_len, opens a page)`` per running request.
        stages: the pool before the step, after ``check_decode_mem``'s eviction, (only if the
            step still did not fit) after ``retract_decode``, and after ``prepare_for_decode``
            (its "need" is the room it asks of the tree: a page per request).
        order: request ids in the retraction order (kept first; victims come off the end).
        victims: the retracted request ids, in the order they were taken.
        ratio: ``new_token_ratio`` before and after.
    """

    step: int
    page_size: int
    rows: tuple[tuple[int, int, int, int, bool], ...]
    stages: tuple[Stage, ...]
    order: tuple[int, ...]
    victims: tuple[int, ...]
    ratio: tuple[float, float]


def _replay(step: int) -> Scheduler:
    """Chapter 5's small run, one step at a time, stopped before ``step``."""
    sched = tiny_retraction_scheduler(fast_forward=False)
    if sched.num_steps < step:
        for _ in sched.steps():
            if sched.num_steps >= step:
                break
    return sched


def evicting_decode_steps() -> list[int]:
    """The decode steps of chapter 5's small run whose memory check evicted from the radix
    cache (and then fitted, or went on to retract)."""
    sched, steps, evicted = tiny_retraction_scheduler(fast_forward=False), [], 0
    for _ in sched.steps():
        if sched.trace.steps["kind"][-1] == "decode" and sched.tree_cache.evicted_tokens > evicted:
            steps.append(sched.num_steps - 1)
        evicted = sched.tree_cache.evicted_tokens
    return steps


def worked_decode_step(step: int | None = None) -> WorkedDecodeStep:
    """Decode step ``step`` of chapter 5's small run (default: its first retraction), stage by
    stage; a step that fits after the check has no retraction stage.

    Raises:
        pagedkv.errors.ConfigError: ``step`` is not a decode step of the run.
    """
    if step is None:
        step = tiny_retraction_run().trace.events_of("retract")[0].step
    sched = _replay(step)
    if sched.num_steps != step:
        raise bad_value("step", step, f"a step of the run (0-{sched.num_steps - 1})")
    sched.enqueue_arrivals()
    sched.prepare_step()
    if sched.get_new_batch_prefill() is not None:
        raise bad_value("step", step, "a decode step (the replay admitted a request)")
    batch, alloc, tree, p = sched.running, sched.allocator, sched.tree_cache, sched.page_size
    batch.filter_finished()
    kv = batch.kv_len.tolist()
    rows = tuple((r.rid, r.prompt_len, r.generated, int(k), int(k) % p == 0)
                 for r, k in zip(batch.reqs, kv, strict=True))
    need = batch.new_tokens_required_next_decode()
    before = Stage("before the step", alloc.available_size(), tree.evictable_size(), need,
                   f"{sum(r[4] for r in rows)} of {len(rows)} requests start a page")
    evicted = tree.evicted_tokens
    fits = batch.check_decode_mem()
    checked = Stage("check_decode_mem", alloc.available_size(), tree.evictable_size(), need,
                    f"evicted {tree.evicted_tokens - evicted} tokens; "
                    + ("fits" if fits else "still short: retract"))
    if fits:
        return WorkedDecodeStep(step, p, rows, (before, checked, _prepare(sched)), (), (),
                                (sched.new_token_ratio, sched.new_token_ratio))
    order = tuple(batch.reqs[i].rid for i in batch.retraction_order())
    ratio = sched.new_token_ratio
    batch.sync()
    evicted = tree.evicted_tokens
    retracted, new_ratio, _ = batch.retract_decode(
        sched.config.retract_decode_steps, abort_last_request=sched.config.release.abort_last_request)
    after = Stage("retract_decode", alloc.available_size(), tree.evictable_size(),
                  batch.new_tokens_required_next_decode(),
                  f"released {len(retracted)}, evicted {tree.evicted_tokens - evicted} tokens")
    return WorkedDecodeStep(step, p, rows, (before, checked, after, _prepare(sched)), order,
                            tuple(r.rid for r in retracted), (ratio, new_ratio))


def _prepare(sched: Scheduler) -> Stage:
    """``prepare_for_decode`` on the batch that stays: room for ``bs x page_size`` slots asked
    of the tree (``alloc_for_decode``), then the step's slots taken."""
    batch, tree = sched.running, sched.tree_cache
    opens = sum(int(k) % sched.page_size == 0 for k in batch.kv_len.tolist())
    evicted = tree.evicted_tokens
    batch.prepare_for_decode()
    return Stage("prepare_for_decode", sched.allocator.available_size(), tree.evictable_size(),
                 len(batch.reqs) * sched.page_size,
                 f"evicted {tree.evicted_tokens - evicted} tokens, "
                 f"then opened {opens} page{'' if opens == 1 else 's'}")
