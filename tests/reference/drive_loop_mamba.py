"""Whole-loop cases on a linear-attention hybrid (Qwen3-Next-like): :func:`drive_loop.random_case`'s
workloads and servers with the radix cache off (``--disable-radix-cache``, which pagedkv
requires of these models) and a pool of state slots (:class:`drive_loop.LoopCase`'s
``mamba_slots``, SGLang's ``max_mamba_cache_size``).

Each running request holds one state slot from admission to finish or retraction, so the slots
cap the running requests: SGLang 0.5.23's ``KVCacheConfigurator.resolve_max_num_reqs`` lowers
``max_running_requests`` to ``max_mamba_cache_size // 1`` (one slot per request without the
radix cache, ``_calculate_mamba_ratio``) and builds that many request rows. The slot counts
are drawn tight (1 to 6, or two more than the requested cap), so that in most cases they, not
``--max-running-requests``, bound the batch; the case's ``max_running_requests`` is the capped
value both schedulers are given, as the sizing hands it to them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from drive_loop import EOS, VOCAB, LoopCase, LoopRequest, random_case

from pagedkv.hybrid_pools import MAMBA_SLOTS_PER_REQUEST_WITH_RADIX as MAMBA_SLOTS_WITH_RADIX
from pagedkv.hybrid_pools import mamba_tracking_slots


def random_mamba_case(seed: int, overlap: bool = False) -> LoopCase:
    """A random linear-attention case; the same seed gives the same case."""
    case = random_case(seed, overlap, radix=False)
    rng = np.random.default_rng([seed, 30])
    requested = case.max_running_requests
    slots = int(rng.choice((1, 2, 3, 4, 6, requested + 2)))
    return dataclasses.replace(case, mamba_slots=slots,
                               max_running_requests=min(requested, slots))


def random_mamba_radix_case(seed: int, overlap: bool = False) -> LoopCase:
    """A random linear-attention case with the radix cache on (SGLang's default server: the
    ``extra_buffer`` strategy): requests share long stems (70 to 200 tokens, cut anywhere),
    so that later ones can reuse states checkpointed every 64 tokens by earlier ones; state
    slots for 1 to 4 running requests at ``3 + track slots`` each (5 with the overlap loop, 4
    without, 3 at pages of one token without it: the ``no_buffer`` strategy), as the sizing
    caps them; prefill chunks of 64 or 128 tokens, or none; a KV pool of 1.05 to 1.8 times
    the longest request, admission at conservativeness 1 or 0.3, so that
    decoding requests are retracted."""
    rng = np.random.default_rng([seed, 40])
    p = int(rng.choice((1, 16)))
    stems = [tuple(int(t) for t in rng.integers(10, VOCAB, int(rng.integers(70, 200))))
             for _ in range(2)]
    reqs, arrival = [], 0
    for _ in range(int(rng.integers(3, 8))):
        arrival += int(rng.integers(0, 6))
        stem = stems[int(rng.integers(0, 2))]
        cut = int(rng.integers(len(stem) // 2, len(stem) + 1))
        tail = tuple(int(t) for t in rng.integers(10, VOCAB, int(rng.integers(1, 40))))
        max_new = int(rng.integers(1, 150))
        outputs = [int(t) for t in rng.integers(10, VOCAB, max_new)]
        if rng.random() < 0.3:
            outputs[int(rng.integers(0, max_new))] = EOS
        reqs.append(LoopRequest(arrival, stem[:cut] + tail, max_new, tuple(outputs)))
    per_request = MAMBA_SLOTS_WITH_RADIX + mamba_tracking_slots(
        disable_radix_cache=False, page_size=p, disable_overlap_schedule=not overlap,
        auto_extra_buffer=True)
    running = int(rng.integers(1, 5))
    biggest = max(-(-(len(r.prompt) + r.max_new_tokens) // p) * p for r in reqs)
    pool = -(-int(biggest * rng.uniform(1.05, 1.8)) // p) * p
    return LoopCase(page_size=p, pool_tokens=pool, requests=tuple(reqs), radix=True,
                    schedule_conservativeness=float(rng.choice((1.0, 0.3))),
                    chunked_prefill_size=int(rng.choice((64, 128))) if rng.random() < 0.5
                    else None, max_running_requests=running,
                    mamba_slots=running * per_request + int(rng.integers(0, 4)),
                    context_len=4096, overlap=overlap)
