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
from drive_loop import LoopCase, random_case


def random_mamba_case(seed: int, overlap: bool = False) -> LoopCase:
    """A random linear-attention case; the same seed gives the same case."""
    case = random_case(seed, overlap, radix=False)
    rng = np.random.default_rng([seed, 30])
    requested = case.max_running_requests
    slots = int(rng.choice((1, 2, 3, 4, 6, requested + 2)))
    return dataclasses.replace(case, mamba_slots=slots,
                               max_running_requests=min(requested, slots))
