"""Where a linear-attention hybrid's states are recorded for the mamba radix cache
(the ``extra_buffer`` strategy's track slots), and when the scheduler learns of it.

Follows SGLang 0.5.23 (non-lazy ``extra_buffer``, no speculative decoding):

- A prefill pass (``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``): a request
  whose extend covers at least one checkpoint grid (``lcm(max(64, p), p)`` tokens) records
  the state at ``prefix + extend // grid * grid`` (or at its match's branching point, when
  that lies inside the extend on the kernel's chunk grid) into its next track slot; the
  positions swap (two track slots) and ``mamba_last_track_seqlen`` is set at once.
- A decode step (``prepare_for_decode``): a request whose sequence reaches a multiple of the
  track interval (``lcm(grid, mamba_track_interval)``, 256) records its state into its next
  track slot. The scheduler learns of it when the step's result is processed
  (``_handle_finish_state_updated_req``, ``_mamba_prefix_cache_update``): the slot becomes
  the last tracked one, ``mamba_last_track_seqlen`` the length then (the one before kept as
  ``mamba_prev_track_seqlen``), and the positions swap. The overlap loop processes a step's
  result after it has prepared the next one: a request already one step further
  (``decode_batch_idx`` one past the step's) subtracts that token, and swaps its positions
  if the step prepared meanwhile records (``mamba_track_mask_next_cpu``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pagedkv.hybrid_pools import MAMBA_TRACK_INTERVAL
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool


def mamba_track_grid(checkpoint_grid: int, interval: int = MAMBA_TRACK_INTERVAL) -> int:
    """Decode tokens between recorded states: ``lcm(checkpoint grid, interval)``
    (``runtime_context.mamba_track_grid``)."""
    return math.lcm(checkpoint_grid, interval)


def prepare_extend_tracks(reqs: Sequence[Any], pool: HybridReqToTokenPool,
                          checkpoint_grid: int, cache_chunk_size: int,
                          state_chunk_size: int) -> None:
    """Each request of a prefill pass (``prefix_len`` and ``extend_len`` set, its track
    slots taken) records a state if its extend covers a checkpoint grid.
    Source: ``_mamba_radix_cache_v2_req_prepare_for_extend`` (no DCP)."""
    for req in reqs:
        prefix, extend = req.prefix_len, req.extend_len
        if extend < checkpoint_grid:
            continue
        aligned = prefix + extend // checkpoint_grid * checkpoint_grid
        track = prefix + extend  # the kernel's last position, or one past an inner one
        if prefix + extend // state_chunk_size * state_chunk_size != aligned:
            track = aligned + 1
        req.mamba_last_track_idx = req.mamba_next_track_idx
        req.mamba_next_track_idx = pool.get_mamba_ping_pong_other_idx(req.mamba_next_track_idx)
        branch = req.mamba_branching_seqlen
        if (branch is not None and (branch - prefix) % cache_chunk_size == 0
                and prefix < branch < track):
            aligned = branch
        req.mamba_last_track_seqlen = aligned


@dataclass(frozen=True)
class DecodeTrack:
    """What a decode step records, per request in batch order (SGLang's batch fields):
    the track position written (``mamba_track_buffer_indices``), whether the step records
    (``mamba_track_mask_cpu``), whether the next step will (``mamba_track_mask_next_cpu``,
    overlap loop only), and each request's ``decode_batch_idx`` at this step."""

    buffer_indices: list[int]
    mask: list[bool]
    mask_next: list[bool] | None
    decode_batch_idx: list[int]


def prepare_decode_tracks(reqs: Sequence[Any], seq_lens: Sequence[int], interval: int,
                          enable_overlap: bool) -> DecodeTrack:
    """A decode step's records (``seq_lens``: each request's length with this step's
    token). Source: ``ScheduleBatch.prepare_for_decode``, ``set_mamba_track_indices_from_reqs``."""
    rem = [int(s) % interval for s in seq_lens]
    return DecodeTrack(
        [0 if r.mamba_next_track_idx is None else r.mamba_next_track_idx for r in reqs],
        [x == 0 for x in rem], [x == interval - 1 for x in rem] if enable_overlap else None,
        [r.decode_batch_idx for r in reqs])


def process_decode_track(req: Any, i: int, track: DecodeTrack, committed_len: int,
                         pool: HybridReqToTokenPool) -> None:
    """The step's result for ``req`` (index ``i`` in it), whose KV now holds
    ``committed_len`` tokens. Source: ``_handle_finish_state_updated_req``,
    ``_mamba_prefix_cache_update`` (non-lazy)."""
    lookahead = req.decode_batch_idx - track.decode_batch_idx[i]
    assert lookahead in (0, 1), lookahead
    completed = track.mask[i]
    known = completed if lookahead == 0 else bool(track.mask_next and track.mask_next[i])
    if completed:
        req.mamba_last_track_idx = track.buffer_indices[i]
        req.mamba_prev_track_seqlen = req.mamba_last_track_seqlen
        req.mamba_last_track_seqlen = committed_len - lookahead
    if known and req.mamba_ping_pong_track_buffer is not None:
        req.mamba_next_track_idx = pool.get_mamba_ping_pong_other_idx(req.mamba_next_track_idx)
