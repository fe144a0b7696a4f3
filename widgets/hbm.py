"""The HBM bar's segments: how one GPU's memory divides at one step of a trace.

Left to right: the weights; what ``1 - mem_fraction_static`` keeps back for activations and
CUDA graphs (everything on the card that is neither weights nor KV pool, so rounding the
pool down to whole pages lands here too); KV in use by running requests; KV the radix cache
keeps that no running request uses (evictable: admission counts it as room); KV reserved by
admission (PrefillAdder's estimate of the running requests' remaining output); and the free
rest of the pool. The segments always sum to the card. The JavaScript renderer
(``hbmBytes``) does the same per-step arithmetic from the constants :func:`hbm_layout` puts
into every encoded run.

On a sliding-window hybrid the pool is two (SGLang 0.5.23's ``HybridSWAPoolConfigurator``):
the segments above are the full pool's, and the SWA pool sits between
them and the rest of the card, out of "other" (``kv_swa_used``: its pages not free, from the
page record; ``kv_swa_free``).

On a linear-attention hybrid (SGLang 0.5.23's state pool beside the full-attention KV pool)
the state pool likewise sits after the KV pool, out of "other": its slots held by running
requests (``state_live``), their track slots (``state_track``), the radix tree's states
(``state_tree``) and free slots (``state_free``), each ``slots * state_bytes``.

Source: SGLang ``model_runner.profile_max_num_token`` (pool = f * memory - weights) and
``schedule_policy.PrefillAdder`` (reservations).
"""

from __future__ import annotations

from typing import Any

SEGMENTS = ("weights", "other", "kv_used", "kv_cached", "kv_reserved", "kv_free")


def hbm_layout(meta: dict[str, Any]) -> dict[str, int]:
    """The constant part of the bar, in bytes: card, weights, other (activations), pool;
    a sliding-window hybrid's (``meta["swa_kv_pool_bytes"]``) also ``swa_pool``, the SWA
    pool, which is then not counted in ``other``; a linear-attention hybrid's
    (``meta["state_pool_bytes"]``) ``state_pool`` and ``state_bytes`` (one slot's), likewise."""
    card, weights, pool = meta["gpu_memory_bytes"], meta["weights_bytes"], meta["kv_pool_bytes"]
    out = {"card": card, "weights": weights, "other": card - weights - pool, "pool": pool}
    swa, state = meta.get("swa_kv_pool_bytes"), meta.get("state_pool_bytes")
    if swa is not None:
        out.update(other=out["other"] - swa, swa_pool=swa)
    if state is not None:
        out.update(other=out["other"] - state, state_pool=state, state_bytes=meta["state_bytes"])
    return out


def hbm_segments(
    layout: dict[str, int], cell_size: int, used: int, reserved: int, evictable: int = 0,
    swa_held_bytes: int = 0, state_slots: dict[str, int] | None = None,
) -> dict[str, int]:
    """Bytes per segment at one step; ``used``, ``reserved`` and ``evictable`` are token
    counts (the trace's ``tokens_used``, ``tokens_reserved``, ``tokens_evictable``).

    What the pool holds comes first (in use, then cached); reservations are an estimate and
    may exceed what is left: the bar then shows the pool as full (reserved is clipped to
    the free pool), the timeline the true number. A sliding-window hybrid's layout adds
    ``kv_swa_used`` (``swa_held_bytes``: its SWA pages not free, in bytes, at most the SWA
    pool) and ``kv_swa_free``; a linear-attention hybrid's ``state_live``, ``state_track``,
    ``state_tree`` and ``state_free`` (``state_slots``: slots per part at the step,
    :func:`pagedkv_widgets.state_slots.slots_at`; all free when None).
    """
    used_b = min(used * cell_size, layout["pool"])
    cached_b = min(evictable * cell_size, layout["pool"] - used_b)
    reserved_b = min(reserved * cell_size, layout["pool"] - used_b - cached_b)
    out = {
        "weights": layout["weights"],
        "other": layout["other"],
        "kv_used": used_b,
        "kv_cached": cached_b,
        "kv_reserved": reserved_b,
        "kv_free": layout["pool"] - used_b - cached_b - reserved_b,
    }
    if "swa_pool" in layout:
        held = min(swa_held_bytes, layout["swa_pool"])
        out.update(kv_swa_used=held, kv_swa_free=layout["swa_pool"] - held)
    if "state_pool" in layout:
        held = {k: (state_slots or {}).get(k, 0) * layout["state_bytes"]
                for k in ("live", "track", "tree")}
        out.update({f"state_{k}": v for k, v in held.items()},
                   state_free=layout["state_pool"] - sum(held.values()))
    return out
