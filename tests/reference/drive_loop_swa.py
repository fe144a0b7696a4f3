"""Whole-loop cases on a sliding-window hybrid: :func:`drive_loop.random_case`'s workloads and
servers, given a window and a second pool (:class:`drive_loop.LoopCase`'s
``sliding_window_size``, ``swa_pool_tokens``, ``swa_eviction_interval``).

The window is short against the requests (4 to 32 tokens, a page or more at page size 16) so
that decode steps release tokens that leave it; ``SGLANG_SWA_EVICTION_INTERVAL`` is drawn from
1, 2, 4 and its default 128 (which in cases this small releases only long requests). The SWA
pool is from a third of the full pool to all of it, never smaller than what the largest
request's admission charges it (SGLang's ``estimate_swa_kv_tokens`` over its whole prompt and
``max_new_tokens``) or what it holds while it decodes alone (its window, the eviction interval
and two pages, or its whole length if that is less), plus two pages: a request the SWA pool
could never admit would wait forever on both sides (SGLang's loop never ends), and one that
cannot decode alone is aborted, neither of which compares much.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from drive_loop import LoopCase, random_case


def _ceil(n: int, p: int) -> int:
    return -(-n // p) * p


def swa_charge(prompt: int, max_new: int, window: int, page_size: int) -> int:
    """SGLang 0.5.23's ``estimate_swa_kv_tokens`` for a whole prompt (paged) and its decode."""
    extend = _ceil(prompt, page_size)
    return max(extend - window, 0) + min(extend + max_new, window) + page_size


def random_swa_case(seed: int, overlap: bool = False) -> LoopCase:
    """A random sliding-window case; the same seed gives the same case."""
    case = random_case(seed, overlap)
    rng = np.random.default_rng([seed, 20])
    p = case.page_size
    window = int(rng.choice((4, 8, 16, 32) if p == 1 else (16, 24, 32, 48)))
    interval = int(rng.choice((1, 2, 4, 128)))
    # a request is admitted only when its charge fits, and it decodes holding its window,
    # the tokens the interval lets pass it and two pages (or all of itself, if shorter)
    need = max(max(swa_charge(len(r.prompt), r.max_new_tokens, window, p),
                   min(len(r.prompt) + r.max_new_tokens, window + interval + 2 * p))
               for r in case.requests)
    swa = _ceil(int(case.pool_tokens * rng.uniform(1 / 3, 1.0)), p)
    swa = max(swa, _ceil(need, p) + 2 * p)
    return dataclasses.replace(case, sliding_window_size=window, swa_pool_tokens=swa,
                               swa_eviction_interval=interval)
