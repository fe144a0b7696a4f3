"""Chapter 3's decode step that does not fit: SGLang issue #4602's numbers, and what the
decode-memory check counts on them.

:func:`decode_oom_case` builds the state through the real paged allocator (no hand-written
numbers); :func:`decode_check` runs SGLang's check and ``retract_decode`` on the same batch.
Source: ``ScheduleBatch.check_decode_mem``, ``new_tokens_required_next_decode`` and
``retract_decode`` in ``python/sglang/srt/managers/schedule_batch.py`` (0.5.9 and 0.5.23).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator
from pagedkv.releases import DEFAULT_SGLANG_VERSION


@dataclass
class DecodeOOMCase:
    """A batch about to decode, with free slots that cannot serve it."""

    alloc: PagedTokenToKVPoolAllocator
    seq_lens: torch.Tensor  # int64 [bs], including the token about to be decoded
    last_loc: torch.Tensor  # int64 [bs]
    crossing: int  # requests whose next token starts a new page
    empty_tail_slots: int  # unused slots inside the batch's own partial pages
    generated: np.ndarray  # int64 [bs]: output tokens each request has produced (>= 1)


def decode_oom_case(num_requests: int = 148, free_pages: int = 32, page_size: int = 64,
                    crossing: int = 40, seed: int = 0) -> DecodeOOMCase:
    """A state with the numbers of SGLang issue #4602 (2025-03-20, ``--page-size 64``):
    ``num_requests`` (148) requests about to decode and ``free_pages`` (32) free pages, i.e.
    2,048 free tokens; the release of that time crashed with "Decode out of memory ... Try to
    allocate 148 tokens. Avaliable tokens: 2048".

    The requests hold random lengths; ``crossing`` of them have exactly full last pages, so
    their next token needs a new page. Each has produced a random number of output tokens
    (``generated``; the rest of its KV is its prompt), which orders a retraction.
    """
    rng = np.random.default_rng(seed)
    full = rng.integers(1, 9, size=num_requests) * page_size
    lens = full - np.where(np.arange(num_requests) < crossing, 0,
                           rng.integers(1, page_size, size=num_requests))
    lens = rng.permutation(lens)
    generated = np.minimum(rng.integers(1, 300, size=num_requests), lens)
    used_pages = int(np.ceil(lens / page_size).sum())
    alloc = PagedTokenToKVPoolAllocator((used_pages + free_pages) * page_size, page_size)
    seq = torch.as_tensor(lens, dtype=torch.int64)
    out = alloc.alloc_extend(torch.zeros_like(seq), seq, torch.full_like(seq, -1),
                             int(seq.sum()))
    last = out[torch.cumsum(seq, 0) - 1]
    tails = int((torch.ceil(seq / page_size) * page_size - seq).sum())
    return DecodeOOMCase(alloc, seq + 1, last, crossing, tails, generated.astype(np.int64))


@dataclass(frozen=True)
class DecodeCheck:
    """What a decode-memory check counts on a :class:`DecodeOOMCase` (slots).

    ``one_per_request``: one slot per request, what SGLang counted before PR #4913 (so the
    check passed and ``alloc_decode`` then crashed); ``need``: SGLang's count since then,
    ``page_size`` per request whose KV ends on a page boundary; ``free``: free slots (whole
    pages); ``retracted``: requests ``retract_decode`` takes out before the step fits;
    ``need_after`` / ``free_after``: the same counts for the batch that stays.
    """

    one_per_request: int
    need: int
    free: int
    retracted: int
    need_after: int
    free_after: int


def decode_check(case: DecodeOOMCase, sglang_version: str = DEFAULT_SGLANG_VERSION) -> DecodeCheck:
    """Run SGLang's decode-memory check and, where it fails, ``retract_decode`` on the same
    batch as ``case`` (rebuilt as a pagedkv ``ScheduleBatch`` of the same lengths, page size,
    free pages and output counts, radix cache off). Does not change ``case``.

    Source: ``ScheduleBatch.check_decode_mem`` / ``new_tokens_required_next_decode`` /
    ``retract_decode`` in ``python/sglang/srt/managers/schedule_batch.py`` (0.5.9 and 0.5.23
    count alike).
    """
    from pagedkv.lessons.examples import running_batch  # the scheduler, lazily
    from pagedkv.managers.config import SchedulerConfig

    p = case.alloc.page_size
    kv = (case.seq_lens - 1).numpy()
    prompt = kv - case.generated + 1  # running_batch holds prompt + generated - 1 tokens
    config = SchedulerConfig(sglang_version=sglang_version)
    batch = running_batch(prompt.tolist(), case.generated.tolist(), (case.generated + 100).tolist(),
                          free=case.alloc.available_size(), page_size=p, config=config)
    need, free = batch.new_tokens_required_next_decode(), batch.allocator.available_size()
    retracted = []
    if not batch.check_decode_mem():
        retracted, _, _ = batch.retract_decode(
            abort_last_request=config.release.abort_last_request)
    return DecodeCheck(len(kv), need, free, len(retracted),
                       batch.new_tokens_required_next_decode(), batch.allocator.available_size())
