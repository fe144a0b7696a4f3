"""How SGLang splits a KV budget between the pools of a hybrid model.

Two families, each as SGLang 0.5.23 sizes it (0.5.9's differences, each a field of
:class:`~pagedkv.releases.Release`, follow the list):

- **Sliding-window hybrids** (gpt-oss): a full pool for the full-attention layers and a
  sliding-window (SWA) pool for the window layers. ``HybridSWAPoolConfigurator`` gives the SWA
  pool ``swa_full_tokens_ratio`` (default 0.8) as many tokens as the full pool, so one full
  token costs ``full_cell + ratio * swa_cell`` bytes; ``SWARequestCapPoolConfigurator``, picked
  when ``--max-running-requests`` is given, the radix cache is off and prefill is chunked,
  sizes the SWA pool from what that many requests can hold live (window, eviction interval,
  pages, chunks in flight) and gives the rest to the full pool
  (``srt/model_executor/pool_configurator.py``).
- **Linear-attention hybrids** (Qwen3-Next): before the KV pool is sized, a share of the
  budget, ``mamba_full_memory_ratio / (1 + ratio)`` (default 0.9 / 1.9), goes to per-request
  recurrent-state slots (``MambaPool``, plus one padding slot); the KV pool of the
  full-attention layers gets the rest (``KVCacheConfigurator._handle_max_mamba_cache``), and
  ``max_running_requests`` is capped at ``slots // slots_per_request``
  (``resolve_max_num_reqs``, ``_calculate_mamba_ratio``: 3 with the radix cache, plus the
  track slots of its ``extra_buffer`` strategy (SGLang's ``mamba_ping_pong_track_buffer``),
  which 0.5.23 picks by default: :func:`mamba_tracking_slots`; 1 without).

SGLang 0.5.9 sizes both in ``ModelRunnerKVCacheMixin`` (``model_runner_kv_cache_mixin.py``):
a sliding-window hybrid is profiled as if every layer were full, the token count capped and
paged, then redistributed so that the SWA pool holds ``ratio`` as many tokens
(``set_num_tokens_hybrid_swa``: :func:`redistribute_swa_tokens`; no request-capped variant, no
window check: ``Release.swa_sized_by_configurator``); the state share keeps no padding slot
(``handle_max_mamba_cache``: ``Release.mamba_share_keeps_padding_slot``), and the cap on requests
is silent (``Release.mamba_cap_warns``), and counts no track slots
(``Release.mamba_auto_extra_buffer``: 0.5.9 resolves the strategy to ``no_buffer``).

Budgets are bytes per GPU; the arithmetic mirrors SGLang's, in GiB floats where SGLang's is,
so that every rounding falls the same way. Errors are SGLang's own start-up errors, raised as
:class:`~pagedkv.errors.NotEnoughMemoryError` with SGLang's words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pagedkv.errors import (
    NotEnoughMemoryError,
    bad_value,
    check_fraction,
    check_positive_int,
)
from pagedkv.units import GiB

#: ``--swa-full-tokens-ratio``'s fallback (``arg_groups/fields/schedule.py``).
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
#: ``SGLANG_SWA_EVICTION_INTERVAL``'s default (``environ.py``): decode steps between evictions.
SWA_EVICTION_INTERVAL = 128
#: ``--mamba-full-memory-ratio``'s fallback: state bytes per KV byte.
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9
#: ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``: state slots per running request with
#: the radix cache on (one live, others held by the tree's checkpoints), before the track
#: slots of the ``extra_buffer`` strategy (:func:`mamba_tracking_slots`).
MAMBA_SLOTS_PER_REQUEST_WITH_RADIX = 3
#: ``--mamba-track-interval``'s default (``arg_groups/fields/exec_.py``): decode tokens between
#: the states the ``extra_buffer`` strategy records for the radix cache.
MAMBA_TRACK_INTERVAL = 256


def _align(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def _ceil_align(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size) * page_size


@dataclass(frozen=True)
class SWAPools:
    """The two token counts SGLang picks, and what it logs while picking them.

    ``cell_size`` is SGLang's ``_cell_size`` (bytes per full token, the SWA share at the
    ratio included: a float); ``lines`` are the configurator's lines and warnings in order.
    """

    configurator: str
    full_tokens: int
    swa_tokens: int
    cell_size: float
    lines: tuple[str, ...]


def swa_request_cap(*, page_size: int, window: int, max_running_requests: int,
                    chunked_prefill_size: int, overlap_schedule: bool = True) -> int:
    """SWA tokens ``max_running_requests`` requests can hold live (SGLang 0.5.23
    ``compute_swa_request_cap``, no speculative decoding, no disaggregation)::

        (window + eviction_interval + page + page) * requests
            + chunks_in_flight * chunked_prefill_size + page

    ``chunks_in_flight`` is 2 with the overlap scheduler (SGLang's default), else 1; the
    per-request term is :func:`swa_tokens_per_request`.
    """
    per_request = swa_tokens_per_request(page_size=page_size, window=window)
    chunks = 2 if overlap_schedule else 1
    return per_request * max(1, max_running_requests) + chunks * chunked_prefill_size + page_size


def swa_tokens_per_request(*, page_size: int, window: int) -> int:
    """SWA-pool tokens SGLang 0.5.23's ``compute_swa_request_cap`` budgets for one running
    request (no speculative decoding)::

        trailing_tokens = window + eviction_interval + page_size  # the last: a padding page
        per_request = trailing_tokens + page_size                  # decode_alloc

    A decoding request needs ``window + 1`` tokens (its window and the token being written)
    but releases the ones that left the window only in batches (``maybe_evict_swa``, every
    ``SGLANG_SWA_EVICTION_INTERVAL`` tokens), so it may hold up to that many more:
    ``window + 1 + eviction_interval`` at most. ``decode_alloc``, one page for the next decode
    step's token, is the ``+ 1`` counted as a whole page. The padding page (``# Padding to make
    sure eviction point is page-aligned``) is added at every page size, also at ``page_size``
    1, where every position is page-aligned and it is not needed: the budget is then one token
    above that most, and ``2 * page_size - 1`` tokens above it in general
    (``model_executor/pool_configurator.py``, ``compute_swa_request_cap``, 0.5.23).

    Raises:
        ConfigError: ``page_size`` or ``window`` below 1.
    """
    check_positive_int("page_size", page_size)
    check_positive_int("window", window)
    return window + SWA_EVICTION_INTERVAL + page_size + page_size


def _ratio_split(tokens: int, *, page_size: int, ratio: float, window: int | None
                 ) -> tuple[int, int, str]:
    """``HybridSWAPoolConfigurator._solve_pool_sizes``: full tokens, SWA tokens, its line."""
    full = _align(tokens, page_size)
    swa = _align(int(full * ratio), page_size)
    if window is not None and window + page_size >= swa:
        raise NotEnoughMemoryError(
            f"SWA pool ({swa} tokens) cannot hold even one request: the prefill admission "
            f"floor is sliding_window_size ({window}) + page_size ({page_size}). Increase "
            "--swa-full-tokens-ratio or the total KV budget.")
    return full, swa, (f"Use sliding window memory pool. full_layer_tokens={full}, "
                       f"swa_layer_tokens={swa}")


def size_swa_pools(available_bytes: int, *, full_cell: int, swa_cell: int, page_size: int,
                   ratio: float, window: int | None, max_total_tokens: int | None,
                   request_cap: int | None) -> SWAPools:
    """Split ``available_bytes`` (SGLang's profiled budget, an int) into a full pool and an
    SWA pool, as SGLang 0.5.23's configurators do, then apply ``--max-total-tokens``.

    Args:
        full_cell: bytes one token takes over all full-attention layers.
        swa_cell: bytes one token takes over all window layers.
        ratio: ``--swa-full-tokens-ratio`` in (0, 1].
        window: SGLang's ``sliding_window_size`` (the model's window - 1 for gpt-oss).
        request_cap: :func:`swa_request_cap` when SGLang picks
            ``SWARequestCapPoolConfigurator``, else None.

    Raises:
        NotEnoughMemoryError: SGLang's error: an SWA pool too small for one request, a cap
            that leaves no full pool, or no full token at all.
    """
    lines: list[str] = []
    if request_cap is None:
        name = "HybridSWAPoolConfigurator"
        cell = full_cell + ratio * swa_cell
        full, swa, line = _ratio_split(int(available_bytes // cell), page_size=page_size,
                                       ratio=ratio, window=window)
        lines.append(line)
    else:
        name = "SWARequestCapPoolConfigurator"
        cell = full_cell + ratio * swa_cell
        swa = _ceil_align(request_cap, page_size)
        fixed = swa * swa_cell
        full = _align(int((available_bytes - fixed) // full_cell), page_size)
        if full <= 0:
            raise NotEnoughMemoryError(
                f"SWA pool cap ({swa} tokens, {fixed / GiB:.2f} GiB) leaves no room for the "
                f"full KV pool within the available {available_bytes / GiB:.2f} GiB. Reduce "
                "--max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, or increase "
                "--mem-fraction-static.")
    if max_total_tokens is not None:
        if max_total_tokens > full:
            lines.append(f"max_total_tokens={max_total_tokens} is larger than the profiled "
                         f"value {full}. Use the profiled value instead.")
        if min(full, max_total_tokens) != full:  # the constraint path re-derives both pools
            capped = max_total_tokens
            if request_cap is None:
                full, swa, line = _ratio_split(capped, page_size=page_size, ratio=ratio,
                                               window=window)
                lines.append(line)
            else:
                full, swa = _align(capped, page_size), min(swa, capped)
    if full <= 0:
        raise NotEnoughMemoryError("Not enough memory. Please try to increase "
                                   "--mem-fraction-static.")
    return SWAPools(name, full, swa, cell, tuple(lines))


def redistribute_swa_tokens(tokens: int, *, full_per_token: int, full_layers: int,
                            swa_per_token: int, swa_layers: int, page_size: int,
                            ratio: float) -> SWAPools:
    """SGLang 0.5.9 ``set_num_tokens_hybrid_swa``: ``tokens`` (profiled at every layer's
    bytes, capped and paged) become a full and an SWA pool of the same bytes, the SWA pool
    holding ``ratio`` as many tokens::

        full = int(tokens * (F * n_full + S * n_swa) / (F * n_full + ratio * S * n_swa))
        swa = int(full * ratio)            both then rounded down to whole pages (swa from
                                           the full count before its rounding)

    ``F``, ``S``: one layer's bytes per token (full, window); the float products keep
    SGLang's order. Nothing is refused here (0.5.9 checks only that ``full`` > 0, after).
    """
    total = tokens * (full_per_token * full_layers + swa_per_token * swa_layers)
    denominator = full_per_token * full_layers + ratio * swa_per_token * swa_layers
    full = int(total / denominator)
    swa = _align(int(full * ratio), page_size)  # from the full count before its rounding
    full = _align(full, page_size)
    line = f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
    return SWAPools("", full, swa, full_per_token * full_layers + swa_per_token * swa_layers,
                    (line,))


@dataclass(frozen=True)
class MambaShare:
    """The state slots SGLang allocates and the budget left for KV.

    ``slots`` is ``max_mamba_cache_size`` (the pool holds one more, a padding slot);
    ``rest_gib`` the KV budget left (GiB, as SGLang carries it).
    """

    slots: int
    rest_gib: float


def mamba_share(rest_gib: float, *, state_bytes: int, full_memory_ratio: float,
                max_mamba_cache_size: int | None, max_running_requests: int | None,
                disable_radix_cache: bool, keep_padding_slot: bool = True) -> MambaShare:
    """SGLang 0.5.23 ``KVCacheConfigurator._handle_max_mamba_cache`` (one rank, no
    speculative decoding, no pipeline parallelism).

    ``--max-mamba-cache-size`` wins; else, with the radix cache off and
    ``--max-running-requests`` given, one slot per request; else
    ``int((budget - state) // state)`` slots where ``budget = rest * r / (1 + r)``.
    The slots and their padding slot, ``(slots + 1) * state_bytes``, leave the KV budget.
    ``keep_padding_slot=False`` (``Release.mamba_share_keeps_padding_slot``, 0.5.9
    ``handle_max_mamba_cache``): ``int(budget // state)`` slots, ``slots * state_bytes`` leave
    the budget, and no slot at all is not an error here.

    Raises:
        NotEnoughMemoryError: SGLang's error when no slot fits (0.5.23).
    """
    if max_mamba_cache_size is not None:
        slots = max_mamba_cache_size
    elif disable_radix_cache and max_running_requests is not None:
        slots = max(1, max_running_requests)
    else:
        budget = rest_gib * full_memory_ratio / (1 + full_memory_ratio) * (1 << 30)
        slots = int(((budget - state_bytes) if keep_padding_slot else budget) // state_bytes)
    if not keep_padding_slot:
        return MambaShare(slots, rest_gib - slots * state_bytes / (1 << 30))
    if slots <= 0:
        raise NotEnoughMemoryError(
            f"Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={slots} (total_rest_memory={rest_gib:.2f} GB, "
            f"mamba_cache_per_req={state_bytes / (1 << 20):.2f} MB). Try: (1) reduce "
            "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce "
            "--speculative-num-draft-tokens, or (4) use GPUs with more memory.")
    return MambaShare(slots, rest_gib - (slots + 1) * state_bytes / (1 << 30))


def mamba_tracking_slots(*, disable_radix_cache: bool, page_size: int,
                         disable_overlap_schedule: bool, auto_extra_buffer: bool) -> int:
    """Track slots (SGLang's ``mamba_ping_pong_track_buffer``) per running request of a
    linear-attention hybrid that supports the ``extra_buffer`` strategy (Qwen3-Next), with
    ``--mamba-radix-cache-strategy auto``.

    SGLang 0.5.23 (``arg_groups/overrides.py``, ``_mamba_radix_cache_resolution``) resolves
    ``auto`` to ``extra_buffer`` when the radix cache is on and the overlap loop is on or
    ``page_size`` > 1; ``mem_cache/allocation_sizing.py``, ``get_mamba_tracking_slots``, then
    gives 2 track slots with the overlap loop, 1 without. Otherwise ``no_buffer``: none.
    ``auto_extra_buffer=False`` (``Release.mamba_auto_extra_buffer``; 0.5.9 resolves ``auto``
    to ``no_buffer``): none.
    """
    if disable_radix_cache or not auto_extra_buffer:
        return 0
    if disable_overlap_schedule and page_size == 1:
        return 0  # no_buffer (which also turns the overlap loop off)
    return 1 if disable_overlap_schedule else 2


def check_mamba_track_interval(page_size: int, tracking_slots: int) -> None:
    """SGLang 0.5.23's start-up check of the ``extra_buffer`` strategy (``tracking_slots`` > 0,
    from :func:`mamba_tracking_slots`): ``arg_groups/mamba_hook.py``,
    ``validate_mamba_extra_buffer``, asserts ``mamba_track_interval % page_size == 0``
    (:data:`MAMBA_TRACK_INTERVAL`, 256), so pages over 256 tokens, or not dividing 256, stop
    the server (a bare ``AssertionError``) before anything is sized. ``no_buffer``
    (``tracking_slots`` 0) is not checked here: ``auto`` resolves to it only with pages of one
    token.

    Raises:
        ConfigError: ``page_size`` does not divide the track interval under ``extra_buffer``.
    """
    if tracking_slots and MAMBA_TRACK_INTERVAL % page_size:
        raise bad_value(
            "page_size", page_size,
            f"a divisor of mamba_track_interval={MAMBA_TRACK_INTERVAL} with the radix cache on "
            "(SGLang 0.5.23 resolves --mamba-radix-cache-strategy auto to extra_buffer, whose "
            "validate_mamba_extra_buffer asserts mamba_track_interval % page_size == 0 and "
            "refuses to start), or --disable-radix-cache")


def mamba_slots_per_request(disable_radix_cache: bool, tracking_slots: int = 0) -> int:
    """SGLang 0.5.23 ``_calculate_mamba_ratio`` (default environment): 1 without the radix
    cache; with it 3 plus the ``tracking_slots`` of :func:`mamba_tracking_slots`."""
    return 1 if disable_radix_cache else MAMBA_SLOTS_PER_REQUEST_WITH_RADIX + tracking_slots


def cap_by_mamba(max_num_reqs: int, slots: int, disable_radix_cache: bool,
                 warns: bool = True, tracking_slots: int = 0) -> tuple[int, tuple[str, ...]]:
    """``resolve_max_num_reqs``'s mamba cap: ``min(reqs, slots // ratio)`` and its warning,
    ``ratio`` from :func:`mamba_slots_per_request`.

    ``warns=False`` (``Release.mamba_cap_warns``; 0.5.9 ``init_memory_pool`` caps the request
    rows silently, and ``TpModelWorker.__init__`` asserts that some request fits).

    Raises:
        NotEnoughMemoryError: SGLang's error when no request fits.
    """
    ratio = mamba_slots_per_request(disable_radix_cache, tracking_slots)
    cap = slots // ratio
    lines: tuple[str, ...] = ()
    if not warns:
        if min(max_num_reqs, cap) <= 0:
            raise NotEnoughMemoryError(
                f"max_running_request is zero: max_mamba_cache_size={slots} state slots, "
                f"{ratio} per request. Try: increase --mem-fraction-static, "
                "--mamba-full-memory-ratio or --max-mamba-cache-size")
        return min(max_num_reqs, cap), ()
    if cap < max_num_reqs:
        lines = (f"max_running_requests is capped to {cap} by the mamba state cache "
                 # SGLang's words, verbatim: "1 state slots" too (checked by the reference tests)
                 f"(max_mamba_cache_size={slots}, {ratio} state slots per request). To raise "
                 "it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve "
                 "the state size with --mamba-ssm-dtype bfloat16.",)
    reqs = min(max_num_reqs, cap)
    if reqs <= 0:
        raise NotEnoughMemoryError(
            f"Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={slots}, mamba_ratio={ratio}, resulting max_num_reqs={reqs}. "
            "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
            "(3) use GPUs with more memory.")
    return reqs, lines


def check_hybrid_flags(swa_ratio: float | None, mamba_ratio: float | None,
                       max_mamba_cache_size: int | None,
                       max_running_requests: int | None) -> dict[str, float]:
    """The hybrid flags, checked, with SGLang's defaults filled in.

    Raises:
        ConfigError: a flag out of range.
    """
    swa = DEFAULT_SWA_FULL_TOKENS_RATIO if swa_ratio is None else swa_ratio
    if swa_ratio is not None:
        check_fraction("swa_full_tokens_ratio", swa_ratio)
    mamba = DEFAULT_MAMBA_FULL_MEMORY_RATIO if mamba_ratio is None else mamba_ratio
    if mamba_ratio is not None and not (isinstance(mamba_ratio, (int, float))
                                        and math.isfinite(mamba_ratio) and mamba_ratio > 0):
        raise bad_value("mamba_full_memory_ratio", mamba_ratio, "a number > 0")
    if max_mamba_cache_size is not None:
        check_positive_int("max_mamba_cache_size", max_mamba_cache_size)
    if max_running_requests is not None:
        check_positive_int("max_running_requests", max_running_requests)
    return {"swa_ratio": swa, "mamba_ratio": mamba}
