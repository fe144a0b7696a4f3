"""The page record's replay: :func:`decode_pages` turns the encoding of
:mod:`pagedkv_widgets.page_encoding` back into every owner change, row and token count of the
run (the JavaScript ``decodePages`` is its twin; tests check the round trip), and
:func:`owners_at` / :func:`rows_at` read one step of it. :class:`Lifetime` (one request's row
from its first step to its free) and the step arithmetic are shared with the encoder.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagedkv_widgets.in_flight_encoding import decode_in_flight
from pagedkv_widgets.state_slots import decode_state_slots
from pagedkv_widgets.swa_encoding import decode_swa


@dataclass
class Lifetime:
    """One request's row from ``start`` (its first step holding KV) to ``end`` (the step
    its row is freed; None: still held at the end of the run).

    Attributes:
        pages: int page ids of its row in row order, as first set.
        exceptions: ``[(step, tokens)]`` where the decode rule does not hold.
        fixes: ``[(step, k, page)]``: entry ``k`` repointed at ``step``.
    """

    rid: int
    start: int
    tokens: int
    end: int | None = None
    pages: list[int] = field(default_factory=list)
    exceptions: list[tuple[int, int]] = field(default_factory=list)
    fixes: list[tuple[int, int, int]] = field(default_factory=list)

    def lengths(self, decoded: np.ndarray, last: int) -> np.ndarray:
        """Token counts after steps ``start .. last`` (int64); ``decoded[s]`` counts the
        decode steps ``0 .. s``."""
        out = self.tokens + decoded[self.start:last + 1] - decoded[self.start]
        for s, tokens in self.exceptions:
            if s <= last:
                out[s - self.start:] += tokens - out[s - self.start]
        return out

    def pages_at(self, step: int) -> list[int]:
        """Its row's page ids (all entries ever set) with the repoints up to ``step``."""
        row = list(self.pages)
        for s, k, page in self.fixes:
            if s <= step:
                row[k] = page
        return row


def decoded_steps(kinds: Sequence[str]) -> np.ndarray:
    """``decoded[s]``: decode steps among ``0 .. s`` (``kinds``: names or letters)."""
    return np.cumsum([k[0] == "d" for k in kinds], dtype=np.int64)


def appear_steps(life: Lifetime, decoded: np.ndarray, page_size: int) -> np.ndarray:
    """The step each entry of ``life``'s row appears at (first step needing it)."""
    last = len(decoded) - 1 if life.end is None else life.end - 1
    need = -(-life.lengths(decoded, last) // page_size)
    return life.start + np.searchsorted(need, np.arange(len(life.pages)), side="right")


def decode_pages(enc: dict[str, Any], kinds: Sequence[str], page_size: int,
                 num_pages: int) -> dict[str, Any]:
    """Inverse of :func:`encode_pages`: ``{"lifetimes": [Lifetime], "changes": {"step",
    "page", "owner"}}``, the owner changes one per page and step (no-ops dropped), in step
    order. :func:`owners_at` and :func:`rows_at` read a step from it. A sliding-window
    hybrid's record also gives ``"swa"``: the SWA pool's owner changes
    (:func:`pagedkv_widgets.swa_encoding.decode_swa`), a linear-attention hybrid's
    ``"state_slots"`` (:func:`pagedkv_widgets.state_slots.decode_state_slots`)."""
    lives: list[Lifetime] = []
    start = 0
    for rid, ds, span, tokens, exc, pages in enc["life"]:
        start += ds
        life = Lifetime(rid, start, tokens, None if span < 0 else start + span,
                        np.cumsum(pages).tolist() if pages else [])
        at = start
        for j in range(0, len(exc), 2):
            at += exc[j]
            life.exceptions.append((at, exc[j + 1]))
        lives.append(life)
    fix = enc["fix"]
    for j in range(0, len(fix), 4):
        lives[fix[j]].fixes.append((fix[j + 1], fix[j + 2], fix[j + 3]))
    decoded = decoded_steps(kinds)
    per_step: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for life in lives:
        for page, s in zip(life.pages, appear_steps(life, decoded, page_size).tolist(),
                           strict=True):
            if s > life.start:
                per_step[s].append((page, life.rid))
    grp, i, s = enc["grp"], 0, 0
    while i < len(grp):
        s += grp[i]
        count, i = grp[i + 1], i + 2
        for _ in range(count):
            owner, slices, i = grp[i], grp[i + 1], i + 2
            for _ in range(slices):
                li, k, n = grp[i:i + 3]
                per_step[s] += [(p, owner) for p in lives[li].pages_at(s)[k:k + n]]
                i += 3
            explicit, i = grp[i], i + 1
            per_step[s] += [(p, owner) for p in grp[i:i + explicit]]
            i += explicit
    owners = np.full(num_pages + 1, -1, dtype=np.int64)
    out: dict[str, list[int]] = {"step": [], "page": [], "owner": []}
    for s in sorted(per_step):
        final = dict(per_step[s])
        for page, owner in sorted(final.items()):
            if owners[page] != owner:
                owners[page] = owner
                out["step"].append(s)
                out["page"].append(page)
                out["owner"].append(owner)
    return {"lifetimes": lives, "changes": out, "page_size": page_size,
            "num_pages": num_pages, "decoded": decoded, **decode_in_flight(enc),
            **({"swa": decode_swa(enc["swa"])} if "swa" in enc else {}),
            **({"state_slots": decode_state_slots(enc["state_slots"])}
               if "state_slots" in enc else {})}


def owners_at(pages: dict[str, Any], step: int) -> np.ndarray:
    """Every page's owner after ``step`` (int64 ``[num_pages + 1]``) from
    :func:`decode_pages` output."""
    owners = np.full(pages["num_pages"] + 1, -1, dtype=np.int64)
    ch = pages["changes"]
    n = int(np.searchsorted(ch["step"], step, side="right"))
    owners[np.asarray(ch["page"][:n], dtype=np.int64)] = ch["owner"][:n]
    return owners


def rows_at(pages: dict[str, Any], step: int) -> dict[int, tuple[int, list[int]]]:
    """``{rid: (tokens, page ids of its row)}`` of every request holding a row after
    ``step``, from :func:`decode_pages` output."""
    p, out = pages["page_size"], {}
    for life in pages["lifetimes"]:
        if life.start <= step and (life.end is None or step < life.end):
            n = int(life.lengths(pages["decoded"], step)[-1])
            out[life.rid] = (n, life.pages_at(step)[:-(-n // p)])
    return out
