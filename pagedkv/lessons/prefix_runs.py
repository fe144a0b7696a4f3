"""Chapter 8's runs: token-id workloads served by the scheduler, read for what the cache did.

:func:`serve` runs :class:`~pagedkv.managers.scheduler.Scheduler` (SGLang 0.5.23's by default,
radix cache on) over requests with real token ids and returns a :class:`PrefixRun`: the pool's
four-way split after every step and what each request found in the tree. Nothing here is a
second server: admission, chunking, retraction and eviction are the scheduler's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pagedkv.errors import check_positive_int
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.scheduler import Scheduler
from pagedkv.workloads.prefix import PrefixRequest, as_specs


@dataclass(frozen=True)
class PoolSplit:
    """int64 ``[steps]`` columns of the pool after each step (slots):
    ``own + protected + evictable + free == size``. ``own`` are running requests' slots
    outside the tree (decoded tokens, unfilled tails of partial pages)."""

    step: np.ndarray
    own: np.ndarray
    protected: np.ndarray
    evictable: np.ndarray
    free: np.ndarray


@dataclass(frozen=True)
class PrefixRun:
    """A finished run and what the prefix cache did in it."""

    scheduler: Scheduler

    @property
    def size(self) -> int:
        """Slots in the pool (``max_total_num_tokens``)."""
        return self.scheduler.max_total_num_tokens

    @cached_property
    def split(self) -> PoolSplit:
        """The pool's split after every step."""
        s = self.scheduler.trace.steps
        free, ev, pr = (np.asarray(s[c], dtype=np.int64) for c in
                        ("tokens_free", "tokens_evictable", "tokens_protected"))
        return PoolSplit(np.asarray(s["step"]), self.size - free - ev - pr, pr, ev, free)

    @cached_property
    def hit_lens(self) -> list[int]:
        """Prompt tokens each request found in the tree when first admitted, by rid."""
        hits = [0] * len(self.scheduler.reqs)
        for e in self.scheduler.trace.events_of("admit"):
            hits[e.rid] = e.extra["cached"]
        return hits

    @property
    def prompt_lens(self) -> list[int]:
        return [r.prompt_len for r in self.scheduler.reqs]

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompt_lens)

    @property
    def reused_tokens(self) -> int:
        return sum(self.hit_lens)

    @property
    def hit_rate(self) -> float:
        """Share of all prompt tokens served from the cache at first admission."""
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def max_running_reqs(self) -> int:
        """The most requests that ran at once."""
        return max(self.scheduler.trace.steps["num_running"], default=0)

    @property
    def peak_held(self) -> int:
        """The most slots running requests held at once, their own plus locked tree slots
        (SGLang's logged ``#token``)."""
        sp = self.split
        return int((sp.own + sp.protected).max()) if len(sp.step) else 0

    @property
    def evicted(self) -> int:
        """Slots the tree evicted over the run."""
        return getattr(self.scheduler.tree_cache, "evicted_tokens", 0)

    @property
    def num_steps(self) -> int:
        return len(self.scheduler.trace)

    @property
    def retractions(self) -> int:
        return len(self.scheduler.trace.events_of("retract"))

    @property
    def chunks(self) -> int:
        """Prefill passes that computed only part of a prompt (chunked prefill)."""
        return len(self.scheduler.trace.events_of("chunk"))

    def retractions_seen(self) -> list[tuple[int, int, int, int]]:
        """Per retraction, in order: ``(rid, held, kept, cached_again)``: KV tokens the victim
        held, those of them the tree kept (its cached prompt prefix), and the tokens its
        re-prefill found in the tree."""
        trace = self.scheduler.trace
        again = [(e.rid, e.extra["cached"]) for e in trace.events_of("reprefill")]
        out = []
        for e in trace.events_of("retract"):
            hit = next(c for r, c in again if r == e.rid)
            again.remove((e.rid, hit))
            out.append((e.rid, e.extra["freed"], e.extra["kept"], hit))
        return out

    def first_prefill(self) -> tuple[int, int, int]:
        """The first prefill pass: requests admitted, prompt tokens computed, and slots the
        admitted requests hold after it (duplicates of a prefix computed twice are freed)."""
        trace = self.scheduler.trace
        admits = [e for e in trace.events_of("admit") if e.step == 0]
        computed = sum(e.extra["extend"] for e in admits)
        sp = self.split
        return len(admits), computed, int(sp.own[0] + sp.protected[0])

    def first_prefill_chunk(self) -> int:
        """Prompt tokens the first prefill pass computed for a request whose prompt it did not
        finish (the chunk that the chunk budget cut), 0 if it finished every prompt. Those
        slots stay the request's own after the pass: the next pass first puts the chunk into
        the tree, which frees the part the tree already holds (SGLang's
        ``Scheduler.get_next_batch_to_run`` calls ``stash_chunked_request``, both releases)."""
        prompt = {r.rid: r.prompt_len for r in self.scheduler.reqs}
        admits = [e for e in self.scheduler.trace.events_of("admit") if e.step == 0]
        return sum(e.extra["extend"] for e in admits
                   if e.extra["cached"] + e.extra["extend"] < prompt[e.rid])


def serve(reqs: Sequence[PrefixRequest], size: int, page_size: int = 1, max_running: int = 8,
          radix: bool = True, max_new_tokens: int | None = None, check: bool = False,
          **config: object) -> PrefixRun:
    """Serve ``reqs`` on a pool of ``size`` slots with SGLang's scheduler.

    Args:
        reqs: requests with token ids (:mod:`pagedkv.workloads.prefix`), all arriving at t=0
            (a later turn arrives when the turn before it finishes).
        size: KV slots (``max_total_num_tokens``), a multiple of ``page_size``.
        page_size: slots per page. max_running: ``max_running_requests``.
        radix: the radix cache on (SGLang's default) or off (``--disable-radix-cache``).
        max_new_tokens: every client's cap (default: each request's true output length).
        check: check every invariant after every step (slower).
        config: any other :class:`SchedulerConfig` field (``sglang_version``, ...);
            ``disable_overlap_schedule`` is True unless given: the chapter reads what a pass
            leaves in the step that ran it (its duplicates freed, its requests cached), which
            SGLang's normal loop shows; the overlap loop processes a pass a step later.

    Raises:
        ConfigError: a size or request out of range.
    """
    specs = as_specs(list(reqs), max_new_tokens)
    config.setdefault("disable_overlap_schedule", True)
    cfg = SchedulerConfig(max_running_requests=check_positive_int("max_running", max_running),
                          **config)
    sched = Scheduler(specs, max_total_num_tokens=size, page_size=page_size, config=cfg,
                      radix_cache=radix, fast_forward=not check)
    for _ in sched.steps():
        if check:
            sched.check_invariants()
    return PrefixRun(sched)
