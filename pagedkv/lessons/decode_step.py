"""One decode step worked through at page size 16: ``check_decode_mem``, then eviction, then
``retract_decode``, each stage's numbers read from the scheduler's own objects.

The step is the first retraction of chapter 5's small run
(:func:`pagedkv.lessons.examples.tiny_retraction_run`). :func:`worked_decode_step` replays
that run to the step, then takes the step's memory decisions in the order
``Scheduler.update_running_batch`` takes them, reading the allocator and the radix cache
between them. Source: SGLang 0.5.23 ``managers/scheduler.py``, ``update_running_batch``;
``managers/schedule_batch.py``, ``check_decode_mem``, ``retract_decode``, ``release_req``.
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
        stages: the pool before the step, after ``check_decode_mem``'s eviction, after
            ``retract_decode``.
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
    while sched.num_steps < step and sched.step():
        pass
    return sched


def worked_decode_step() -> WorkedDecodeStep:
    """The first retraction of chapter 5's small run, stage by stage.

    Raises:
        pagedkv.errors.ConfigError: the replay does not reach a decode step that retracts
            (the run changed under it).
    """
    step = tiny_retraction_run().trace.events_of("retract")[0][0]
    sched = _replay(step)
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
        raise bad_value("step", step, "a step whose decode does not fit")
    order = tuple(batch.reqs[i].rid for i in batch.retraction_order())
    ratio = sched.new_token_ratio
    batch.sync()
    evicted = tree.evicted_tokens
    retracted, new_ratio, _ = batch.retract_decode(
        sched.config.retract_decode_steps, abort_last_request=sched.config.release.abort_last_request)
    after = Stage("retract_decode", alloc.available_size(), tree.evictable_size(),
                  batch.new_tokens_required_next_decode(),
                  f"released {len(retracted)}, evicted {tree.evicted_tokens - evicted} tokens")
    return WorkedDecodeStep(step, p, rows, (before, checked, after), order,
                            tuple(r.rid for r in retracted), (ratio, new_ratio))
