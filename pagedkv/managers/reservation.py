"""What the running batch holds back for its future output, and what a request can ever hold.

Follows SGLang 0.5.23's ``python/sglang/srt/managers/schedule_policy.py``:
``PrefillAdder._get_running_request_total_token_offset`` (:func:`running_reservation`: each
running request reserves ``min(max_new_tokens - generated, CLIP) * new_token_ratio``; 0.5.23:
ratio 1.0 for an ignore-EOS request) and the worst case of ``add_one_req_ignore_eos``
(:func:`ignore_eos_states`, :func:`ignore_eos_worst_case_fits`). :func:`window_reservations`
is pagedkv's own: the same sums for many decode steps at once (the fast-forward's rows).
:class:`~pagedkv.managers.schedule_policy.PrefillAdder` charges admission against these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pagedkv.managers.config import Policy, SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.mem_cache.allocator import ceil_to_page

IGNORE_EOS_RESERVE_TOKENS = 1  # SGLang's slack per request in the ignore-EOS simulation


def footprint(prompt_len: int | np.ndarray, max_new_tokens: int | np.ndarray,
              page_size: int) -> int | np.ndarray:
    """Slots a request can ever hold: ``ceil_to_page(prompt_len + max_new_tokens - 1)``.

    The last sampled token's KV is never written, hence the ``- 1``. Used by ``reserve_all``.
    """
    return ceil_to_page(prompt_len + max_new_tokens - 1, page_size)


def running_reservation(config: SchedulerConfig, page_size: int, new_token_ratio: float,
                        prompt_len: np.ndarray, max_new_tokens: np.ndarray,
                        generated: np.ndarray, kv_len: np.ndarray,
                        ignore_eos: np.ndarray | None = None) -> float:
    """Tokens admission holds back for the running batch's future output.

    Arrays are int64 ``[num_running]`` (``ignore_eos`` bool). ``sglang``: the Python-order
    sum of ``min(max_new_tokens - generated, CLIP) * ratio`` per request, ``ratio`` being
    ``new_token_ratio`` (0.5.23: 1.0 for an ignore-EOS request)
    (``PrefillAdder._get_running_request_total_token_offset``); ``reserve_all``: every
    request's remaining ``footprint``; ``no_reserve``: 0.
    """
    return float(window_reservations(config, page_size, np.array([new_token_ratio]), prompt_len,
                                     max_new_tokens, generated, kv_len, ignore_eos)[0])


WINDOW_BLOCK = 1 << 20  # entries of one [steps, requests] block of window_reservations


def window_reservations(config: SchedulerConfig, page_size: int, ratios: np.ndarray,
                        prompt_len: np.ndarray, max_new_tokens: np.ndarray,
                        generated: np.ndarray, kv_len: np.ndarray,
                        ignore_eos: np.ndarray | None = None) -> np.ndarray:
    """:func:`running_reservation` at ``len(ratios)`` successive decode steps, at once.

    Step ``j`` has ``new_token_ratio`` ``ratios[j]`` and every request's ``generated`` and
    ``kv_len`` ``j`` higher than given (nobody joins or leaves). Returns float64
    ``[len(ratios)]``, each entry bit for bit the single step's value (the same products,
    summed in the same order by ``cumsum`` along each step's row).
    """
    ratios = np.asarray(ratios, dtype=np.float64)
    out = np.zeros(len(ratios))
    if not len(prompt_len) or config.policy is Policy.NO_RESERVE:
        return out
    block = max(1, WINDOW_BLOCK // len(prompt_len))  # rows per block: bounded memory
    per_eos = (config.policy is Policy.SGLANG and ignore_eos is not None
               and config.release.ignore_eos_reserves_all and bool(np.count_nonzero(ignore_eos)))
    for start in range(0, len(ratios), block):
        steps = np.arange(start, min(start + block, len(ratios)))[:, None]
        if config.policy is Policy.SGLANG:
            left = np.minimum(max_new_tokens - (generated + steps), config.clip_max_new_tokens)
            ratio = ratios[steps]
            left = left * (np.where(ignore_eos, 1.0, ratio) if per_eos else ratio)
            out[steps[:, 0]] = np.cumsum(left, axis=1)[:, -1]  # sequential, as Python's sum()
        else:  # reserve_all
            final = footprint(prompt_len, max_new_tokens, page_size)
            out[steps[:, 0]] = (final - ceil_to_page(kv_len + steps, page_size)).sum(axis=1)
    return out


def ignore_eos_states(req: Req, running: ScheduleBatch | None, admitted: Sequence[Req],
                      new_token_ratio: float,
                      states: list[tuple[float, int]] | None) -> list[tuple[float, int]]:
    """``(tokens_left, tokens_occupied)`` of ``req``, the ``running`` batch and the
    ``admitted``, sorted by ``tokens_left`` (those with none left dropped): built when
    ``states`` is None (the pass's first ignore-EOS request), else ``req``'s inserted into
    ``states`` in order. ``tokens_left`` is ``max_new_tokens * ratio - generated``, ratio 1.0
    for an ignore-EOS request. Source: ``PrefillAdder.add_one_req_ignore_eos``."""
    def state(max_new: int, generated: int, prompt: int, ignore: bool) -> tuple[float, int]:
        ratio = 1.0 if ignore else new_token_ratio
        return max_new * ratio - generated, prompt + generated

    new = state(req.max_new_tokens, req.generated, req.prompt_len, req.ignore_eos)
    if states is None:
        rows = [new]
        b = running
        if b is not None:
            rows += [state(*cols) for cols in zip(b.max_new_tokens.tolist(), b.generated.tolist(),
                                                  b.prompt_len.tolist(), b.ignore_eos.tolist(),
                                                  strict=True)]
        rows += [state(r.max_new_tokens, r.generated, r.prompt_len, r.ignore_eos)
                 for r in admitted]
        return sorted((s for s in rows if s[0] > 0), key=lambda s: s[0])
    if new[0] > 0:
        i = 0
        for i in range(len(states)):
            if new[0] <= states[i][0]:
                break
        states.insert(i, new)
    return states


def ignore_eos_worst_case_fits(states: Sequence[tuple[float, int]], cur_rem: float) -> bool:
    """Whether ``cur_rem`` free tokens carry every request of ``states`` (from
    :func:`ignore_eos_states`) to its limit: in order, the one with the fewest tokens left
    finishes first and frees what it occupied for the rest, each step keeping
    ``IGNORE_EOS_RESERVE_TOKENS`` of slack per request still running."""
    freed = 0
    for i, (tokens_left, occupied) in enumerate(states):
        bs = len(states) - i
        if cur_rem + freed - tokens_left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
            return False
        freed += occupied
    return True
