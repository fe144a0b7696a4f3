"""Chapter 4's cached admission: a newcomer offered to SGLang's ``PrefillAdder`` on a live
server's state, its prompt partly in the radix cache.

:func:`admission_snapshot` asks the adder over a stopped
:class:`~pagedkv.managers.scheduler.Scheduler`'s state as its next prefill pass would;
:func:`support_bot_snapshot` stops chapter 8's support bot (:data:`SUPPORT_SNAPSHOT`) at the
moment chapter 4 describes and asks about one more chat. Source:
``Scheduler.get_new_batch_prefill``, ``PrefillAdder.add_one_req`` (SGLang 0.5.23
``managers/scheduler.py``, ``managers/schedule_policy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.errors import check_positive_int
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_policy import AddReqResult, PrefillAdder


@dataclass(frozen=True)
class CachedAdmission:
    """One newcomer offered to ``PrefillAdder`` on a live server's state (tokens).

    ``matched``: its prompt tokens found in the radix cache (off its charge); ``extend``:
    tokens it must compute; ``need``: the newcomer test's left side; ``available``,
    ``evictable``, ``reserved``: the state it was measured against (``rem_total_tokens =
    available + evictable - reserved``, with its own prefix locked first: ``locked`` of those
    evictable tokens stop counting); ``result``: the adder's answer.
    """

    matched: int
    extend: int
    need: float
    available: int
    evictable: int
    locked: int
    reserved: float
    rem_total: float
    result: AddReqResult


def admission_snapshot(sched: object, newcomer: Req) -> CachedAdmission:
    """Offer ``newcomer`` to a fresh ``PrefillAdder`` over ``sched``'s current state (a
    :class:`~pagedkv.managers.scheduler.Scheduler` stopped between steps), as the next prefill
    pass would. Matching touches the tree (access times, maybe a split), and the admission's
    lock is released again: run no further steps of ``sched`` after asking.
    Source: ``Scheduler.get_new_batch_prefill``, ``PrefillAdder.add_one_req``.
    """
    tree, alloc = sched.tree_cache, sched.allocator
    adder = PrefillAdder(sched.config, tree, alloc, sched.running, sched.new_token_ratio)
    available, evictable = alloc.available_size(), tree.evictable_size()
    reserved = adder.rem_total_token_offset
    match = tree.match_prefix(newcomer.token_ids(max(newcomer.fill_len - 1, 0)))
    newcomer.prefix_len = newcomer.cache_protected_len = len(match.device_indices)
    newcomer.last_node = match.last_device_node
    extend = newcomer.fill_len - newcomer.prefix_len
    tree.inc_lock_ref(newcomer.last_node)
    locked = evictable - tree.evictable_size()
    rem_total = adder.rem_total_tokens
    tree.dec_lock_ref(newcomer.last_node)
    result = adder.add_one_req(newcomer)
    if newcomer in adder.can_run_list:
        tree.dec_lock_ref(newcomer.last_node)
    return CachedAdmission(newcomer.prefix_len, extend, adder.newcomer_need(newcomer, extend),
                           available, evictable, locked, reserved, rem_total, result)


def free_without_radix_cache(snap: CachedAdmission, running: int, shared_len: int) -> int:
    """The most free slots the same moment could leave a server started with
    ``--disable-radix-cache`` (SGLang's ``ChunkCache``, pages of one token): the finished
    requests' ``snap.evictable`` tokens are free, but each of the ``running`` requests holds
    its own copy of the ``shared_len``-token prefix they share in the tree, ``running - 1``
    copies more. At most, since the running requests may share more than that prefix.
    Raises ConfigError if ``running`` or ``shared_len`` is not an int >= 1."""
    check_positive_int("running", running)
    check_positive_int("shared_len", shared_len)
    return snap.available + snap.evictable - (running - 1) * shared_len


@dataclass(frozen=True)
class SupportSnapshot:
    """Chapter 4's cached admission, as set up: the support bot of chapter 8
    (:func:`pagedkv.lessons.prefix_examples.support_bot`: ``chats`` chats behind one
    ``system_len``-token system prompt, questions and answers of ``question`` and ``answer``
    tokens, ``max_new_tokens`` each) arriving at ``rate`` chats/s on a ``pool``-slot pool
    with at most ``max_running`` running, stopped when ``finished`` chats have finished, at
    least ``running`` run and nobody waits; then a newcomer with the same system prompt and
    a ``newcomer_question``-token question is offered to ``PrefillAdder``."""

    chats: int
    system_len: int
    question: tuple[int, int]
    answer: tuple[int, int]
    max_new_tokens: int
    rate: float
    pool: int
    max_running: int
    finished: int
    running: int
    newcomer_question: int


def _support_snapshot() -> SupportSnapshot:
    from pagedkv.lessons.prefix_examples import (
        SUPPORT_ANSWER,
        SUPPORT_CHATS,
        SUPPORT_MAX_NEW,
        SUPPORT_QUESTION,
        SUPPORT_RUNNING,
        SUPPORT_SYSTEM_LEN,
    )

    return SupportSnapshot(SUPPORT_CHATS, SUPPORT_SYSTEM_LEN, SUPPORT_QUESTION, SUPPORT_ANSWER,
                           SUPPORT_MAX_NEW, rate=4.0, pool=16_384, max_running=SUPPORT_RUNNING,
                           finished=20, running=10, newcomer_question=SUPPORT_QUESTION[1])


SUPPORT_SNAPSHOT = _support_snapshot()


def support_bot_snapshot(setup: SupportSnapshot = SUPPORT_SNAPSHOT) -> tuple[CachedAdmission, object]:
    """Chapter 4's cached admission (:data:`SUPPORT_SNAPSHOT`): the support bot served until
    ``setup.finished`` chats have finished, at least ``setup.running`` run and nobody waits,
    then a newcomer is offered to ``PrefillAdder``. Returns the answer and the stopped
    scheduler (page size 1, SGLang's default)."""
    from pagedkv.lessons.prefix_examples import support_bot
    from pagedkv.managers.scheduler import Scheduler
    from pagedkv.workloads.prefix import as_specs

    reqs = support_bot()
    sched = Scheduler(as_specs(reqs, max_new_tokens=setup.max_new_tokens, rate=setup.rate),
                      max_total_num_tokens=setup.pool,
                      config=SchedulerConfig(max_running_requests=setup.max_running))
    for _ in sched.steps():
        if (sched.num_finished >= setup.finished and len(sched.running) >= setup.running
                and not sched.waiting):
            break
    system = np.asarray(reqs[0].input_ids[:setup.system_len], dtype=np.int64)
    question = np.arange(10**6, 10**6 + setup.newcomer_question, dtype=np.int64)  # ids no chat uses
    newcomer = Req(len(reqs), setup.system_len + setup.newcomer_question, None,
                   setup.max_new_tokens, input_ids=np.concatenate((system, question)))
    return admission_snapshot(sched, newcomer), sched
