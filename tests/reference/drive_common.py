"""Pieces the reference drivers share: the random draws that build their cases, the
prefill-batch bookkeeping of the allocator executors and the sliding-window allocator's
recorded state. Each lives here once so that two drivers drawing or stepping alike cannot
drift apart; what a driver does differently stays in the driver."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


def prefix_sequence(rng: np.random.Generator, seqs: list[list[int]], p: int) -> list[int]:
    """A token sequence that often starts with a prefix of an earlier one in ``seqs`` (cut
    anywhere), then 1..5p+3 tokens from a small alphabet half the time (so keys also diverge
    inside pages)."""
    head: list[int] = []
    if seqs and rng.random() < 0.7:
        base = seqs[int(rng.integers(len(seqs)))]
        head = base[:int(rng.integers(0, len(base) + 1))]
    tail = rng.integers(1, 5 if rng.random() < 0.5 else 1000, int(rng.integers(1, 5 * p + 4)))
    return head + tail.tolist()


def random_prefill(rng: np.random.Generator, live: list[str], cache_pages: dict[str, int],
                   n: int, p: int) -> list[tuple[str, int, Any]]:
    """One random prefill batch ``[(rid, tokens, share), ...]``: up to two live requests'
    next chunks, then one or two new requests ``r{n}.{k}`` (added to ``live``), each on a
    cached prefix ``share = (name, pages)`` 40% of the time."""
    batch: list[tuple[str, int, Any]] = []
    for rid in rng.permutation(live)[:int(rng.integers(0, 3))].tolist():
        batch.append((rid, int(rng.integers(1, 2 * p + 3)), None))  # a chunk's next part
    for k in range(int(rng.integers(1, 3))):
        share = None
        if cache_pages and rng.random() < 0.4:
            name = str(rng.choice(sorted(cache_pages)))
            share = (name, int(rng.integers(1, cache_pages[name] + 1)))
        rid = f"r{n}.{k}"
        batch.append((rid, int(rng.integers(1, 3 * p + 5)), share))
        live.append(rid)
    return batch


def plan_extend(step_batch: list[tuple[str, int, Any]], rows: dict[str, list[int]],
                cached: dict[str, list[int]], p: int) -> tuple[list, list[int], list[int], list[int]]:
    """The batch an ``("extend", ...)`` step runs (requests whose prefix was never cached are
    dropped) and its ``prefix_lens``, ``seq_lens`` and ``last_loc``."""
    batch = [(r, n, s) for r, n, s in step_batch if r in rows or s is None or s[0] in cached]
    pre, seq, last = [], [], []
    for rid, n, share in batch:
        row = rows[rid] if rid in rows else (cached[share[0]][:share[1] * p] if share else [])
        pre.append(len(row))
        seq.append(len(row) + n)
        last.append(row[-1] if row else -1)
    return batch, pre, seq, last


def take_extend(batch: list, pre: list[int], out: list[int], rows: dict[str, list[int]],
                cached: dict[str, list[int]], p: int) -> list[tuple[str, int]]:
    """Append the slots ``out`` of a successful extend to each request's row; returns the new
    requests with where their own slots begin (after the shared prefix)."""
    new, at = [], 0
    for (rid, n, share), before in zip(batch, pre, strict=True):
        if rid not in rows:
            rows[rid] = cached[share[0]][:share[1] * p] if share else []
            new.append((rid, before))
        rows[rid] = rows[rid] + out[at:at + n]
        at += n
    return new


def run_extend(pool: Any, step_batch: list[tuple[str, int, Any]], rows: dict[str, list[int]],
               cached: dict[str, list[int]], p: int) -> tuple[Any, list, list[tuple[str, int]]]:
    """One ``("extend", ...)`` step on ``pool`` (its adapter's ``extend``): returns the slots
    handed out (None: out of memory, or an empty batch), the batch that ran and the new
    requests with where their own slots begin (:func:`take_extend`)."""
    batch, pre, seq, last = plan_extend(step_batch, rows, cached, p)
    out = pool.extend(pre, seq, last) if batch else None
    new = take_extend(batch, pre, out, rows, cached, p) if out is not None else []
    return out, batch, new


def take_decode(rids: list[str], out: list[int] | None, rows: dict[str, list[int]]) -> None:
    """Append each request's decode slot in ``out`` (None: the decode ran out) to its row."""
    if out is not None:
        for rid, slot in zip(rids, out, strict=True):
            rows[rid].append(slot)


@contextmanager
def free_group(pool: Any, grouped: bool) -> Iterator[None]:
    """The frees inside run in one free group (``free_group_begin`` ... ``free_group_end``)
    when ``grouped``; as called one by one otherwise."""
    if grouped:
        pool.group(True)
    yield
    if grouped:
        pool.group(False)


def swa_pool_state(a: Any) -> dict:
    """A pagedkv ``SWATokenToKVPoolAllocator``'s record after its invariants are checked:
    both available sizes, both free lists and the full->SWA mapping."""
    a.check_invariants()
    return {"available": (a.full_available_size(), a.swa_available_size()),
            "free_full": a.full_attn_allocator.free_pages.tolist(),
            "free_swa": a.swa_attn_allocator.free_pages.tolist(),
            "mapping": a.full_to_swa_index_mapping.tolist()}
