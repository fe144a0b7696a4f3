"""What the scheduler refuses or clamps when it receives the workload, and its request limit.

Follows SGLang's ``Scheduler.handle_generate_request`` (``python/sglang/srt/managers/
scheduler.py``: the prompt-length check and the ``max_new_tokens`` clamp at arrival),
``TpModelWorker`` (``max_req_input_len``), ``PrefillAdder.add_one_req_ignore_eos`` (the
worst-case test with the radix cache off) and ``ModelRunner`` / ``ServerArgs``
(``max_running_requests``). pagedkv serves a fixed list of requests, so it checks them all
when the scheduler is built and refuses one that SGLang could never serve with an error
(SGLang aborts it at arrival).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pagedkv.errors import bad_request, bad_value, check_positive_int
from pagedkv.managers.config import Policy, SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_policy import footprint
from pagedkv.mem_cache.allocator import ceil_to_page
from pagedkv.sizing import max_req_input_len


def validate_sizes(page_size: int, max_total_num_tokens: int, config: SchedulerConfig,
                   context_len: int | None) -> tuple[int, int, int | None]:
    """``(page_size, max_total_num_tokens, context_len)`` checked: positive integers, the
    pool a multiple of the page (at least one), ``chunked_prefill_size`` None or at least a
    page, ``context_len`` None or positive.

    Raises:
        ConfigError: any of them out of range.
    """
    p = check_positive_int("page_size", page_size)
    total = check_positive_int("max_total_num_tokens", max_total_num_tokens, minimum=p)
    if total % p:
        raise bad_value("max_total_num_tokens", total, f"a multiple of page_size={p}")
    if config.chunked_prefill_size is not None and config.chunked_prefill_size < p:
        raise bad_value("chunked_prefill_size", config.chunked_prefill_size,
                        f"None or an integer >= page_size={p}")
    return p, total, None if context_len is None else check_positive_int("context_len", context_len)


def default_max_running_requests(max_total_num_tokens: int, context_len: int | None) -> int:
    """``min(clamp(tokens / context_len * 512, 2048, 4096), tokens // 2)`` (SGLang, both
    releases; 4096 rows without a context length)."""
    rows = 4096 if context_len is None else min(max(int(max_total_num_tokens / context_len * 512),
                                                    2048), 4096)
    return max(1, min(rows, max_total_num_tokens // 2))


def validate_requests(reqs: Sequence[Req], *, config: SchedulerConfig, page_size: int,
                      max_total_num_tokens: int, context_len: int | None,
                      radix_cache: bool) -> None:
    """Refuse what SGLang could never serve; clamp ``max_new_tokens`` as it does at arrival.

    ``max_req_len = min(context_len - 1, max_total_num_tokens - 1)``, prompts must be
    shorter than ``max_req_input_len = max_req_len - 5``; ``max_new_tokens`` becomes
    ``min(max_new_tokens, max_req_len - prompt_len - 1)`` (0.5.23: and at most
    ``max_total_num_tokens - ceil_to_page(prompt_len) - page_size - 1``). With the radix
    cache off, an ignore-EOS request must pass SGLang's worst-case test on an empty pool
    (``pool - ceil_to_page(prompt) - overhead - max_new_tokens > 1``), or SGLang would
    keep it waiting forever. ``context_len`` None: only the pool bounds them.

    Raises:
        ConfigError: a prompt too long, a ``follows`` that does not name an earlier request,
            an ignore-EOS request the radix-off test never admits, a ``reserve_all``
            footprint as large as the pool.
    """
    limit = max_req_input_len(max_total_num_tokens, context_len or max_total_num_tokens)
    if not _clamp_all(reqs, config, page_size, max_total_num_tokens, limit, radix_cache):
        _check_each(reqs, config, page_size, max_total_num_tokens, limit, radix_cache)


def _check_each(reqs: Sequence[Req], cfg: SchedulerConfig, p: int, total: int, limit: int,
                radix_cache: bool) -> None:
    """:func:`validate_requests` request by request (``limit``: ``max_req_input_len``)."""
    max_req_len = limit + 5
    overhead = p if cfg.release.extra_page_per_request else 0
    for r in reqs:
        if r.prompt_len >= limit:
            raise bad_request(r.rid, "prompt_len", r.prompt_len,
                            f"< max_req_input_len={limit} (min(context_len - 1, "
                            f"max_total_num_tokens - 1) - 5; {_longer_prompts(limit, total)})")
        if r.follows is not None and not 0 <= r.follows < r.rid:
            raise bad_request(r.rid, "follows", r.follows, f"an earlier rid in [0, {r.rid})")
        prompt_pages = int(ceil_to_page(r.prompt_len, p))
        cap = max_req_len - r.prompt_len - 1
        if cfg.release.cap_max_new_tokens_by_pool:
            cap = min(cap, total - prompt_pages - p - 1)
        r.max_new_tokens = max(1, min(r.max_new_tokens, cap))
        slack = total - prompt_pages - overhead - r.max_new_tokens
        if r.ignore_eos and not radix_cache and slack <= 1:
            raise bad_request(r.rid, "(ignore_eos) prompt_len + max_new_tokens",
                            r.prompt_len + r.max_new_tokens,
                            f"< {total - overhead - 1} so that admission ever takes it "
                            "with the radix cache off")
        # admission refuses a need >= rem_total_tokens, so the footprint must stay below
        if cfg.policy is Policy.RESERVE_ALL and footprint(r.prompt_len, r.max_new_tokens, p) >= total:
            raise bad_request(r.rid, "prompt_len + max_new_tokens",
                            r.prompt_len + r.max_new_tokens,
                            f"a footprint below max_total_num_tokens={total} under reserve_all")


def _longer_prompts(limit: int, total: int) -> str:
    """What would take a longer prompt: a larger pool where the pool set ``limit``, else
    nothing but a model with a longer context."""
    if limit == total - 1 - 5:
        return ("the pool set it: a larger pool takes longer prompts (a higher "
                "mem_fraction_static, or a higher or no max_total_tokens cap)")
    return "the model's context set it"


def _clamp_all(reqs: Sequence[Req], cfg: SchedulerConfig, p: int, total: int, limit: int,
               radix_cache: bool) -> bool:
    """:func:`validate_requests` over numpy columns, for a long workload: the same clamps,
    written back only to the requests they change. False, with nothing changed, when a
    request would be refused, follows another or has a length past int64 (the per-request
    loop then does it all and names the first refusal)."""
    n = len(reqs)
    if any(r.follows is not None for r in reqs):
        return False
    try:
        prompt = np.fromiter((r.prompt_len for r in reqs), np.int64, n)
        asked = np.fromiter((r.max_new_tokens for r in reqs), np.int64, n)
    except OverflowError:
        return False
    if n and int(prompt.max()) >= limit:
        return False
    prompt_pages = ceil_to_page(prompt, p)
    cap = limit + 5 - prompt - 1
    if cfg.release.cap_max_new_tokens_by_pool:
        cap = np.minimum(cap, total - prompt_pages - p - 1)
    new = np.maximum(1, np.minimum(asked, cap))
    overhead = p if cfg.release.extra_page_per_request else 0
    if not radix_cache:
        eos = np.fromiter((r.ignore_eos for r in reqs), bool, n)
        if (eos & (total - prompt_pages - overhead - new <= 1)).any():
            return False
    if cfg.policy is Policy.RESERVE_ALL and (footprint(prompt, new, p) >= total).any():
        return False
    for i in np.flatnonzero(new != asked).tolist():
        reqs[i].max_new_tokens = int(new[i])
    return True
