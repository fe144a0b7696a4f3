"""The page record of a run (``trace["page_events"]``), compact enough for a book page.

:class:`pagedkv.managers.page_recorder.PageRecorder` lists owner changes, row entries and
token counts. A card-scale run has ~60,000 owner changes, but most of them repeat what the
rows already say: a page a request's row gains during decode becomes that request's own,
and the pages that later turn cached, shared, free or another request's are runs of
consecutive entries of some row. So the encoding keeps:

- ``life``: one entry per *lifetime* (a request from the step it first holds KV to the step
  its row is freed; a retracted request that comes back has a second one), in order of
  their first step: ``[rid, first step (delta from the previous lifetime's), steps it lives
  (-1: to the end), tokens at its first step, [token exceptions], [row page ids (delta)]]``.
  Token exceptions are ``[step (delta, from the first step), tokens, ...]`` where a step
  does not follow the rule "a decode step adds one token". The row's ``k``-th page appears
  at the first step whose token count needs ``k + 1`` pages;
- ``fix``: ``[lifetime, step, k, page, ...]``: a row entry repointed later (the radix cache
  swaps a request's copy of a prefix for the tree's);
- ``grp``: what the rows do not say, per step: ``[step (delta), groups, (owner, slices,
  (lifetime, k, count)..., pages, page ids...)...]``; a slice names ``count`` consecutive
  entries of a lifetime's row (as of that step).

Replay rule, at each step: first every row page that appeared at this step, after the
lifetime's first step, becomes its request's own; then each group sets its pages' owner.
:func:`decode_pages` replays it (the JavaScript ``decodePages`` is its twin); tests check
that it gives back every owner change, row and token count of the record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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


def _lifetimes(lengths: dict[str, list[int]]) -> list[Lifetime]:
    """Lifetimes from the recorded token counts (a count of 0 frees the row)."""
    open_: dict[int, Lifetime] = {}
    out: list[Lifetime] = []
    for s, rid, tokens in zip(lengths["step"], lengths["rid"], lengths["tokens"], strict=True):
        life = open_.get(rid)
        if life is None:
            life = open_[rid] = Lifetime(rid, s, tokens)
            out.append(life)
        elif tokens:
            life.exceptions.append((s, tokens))
        else:
            life.end = s
            del open_[rid]
    return out


def _decoded(kinds: Sequence[str]) -> np.ndarray:
    """``decoded[s]``: decode steps among ``0 .. s`` (``kinds``: names or letters)."""
    return np.cumsum([k[0] == "d" for k in kinds], dtype=np.int64)


def _appear_steps(life: Lifetime, decoded: np.ndarray, page_size: int) -> np.ndarray:
    """The step each entry of ``life``'s row appears at (first step needing it)."""
    last = len(decoded) - 1 if life.end is None else life.end - 1
    need = -(-life.lengths(decoded, last) // page_size)
    return life.start + np.searchsorted(need, np.arange(len(life.pages)), side="right")


def encode_pages(record: dict[str, Any], kinds: Sequence[str], page_size: int) -> dict[str, Any]:
    """Encode ``PageRecorder.to_dict()`` (see the module docstring).

    Args:
        record: ``{"step", "page", "owner", "rows", "lengths"}`` as the recorder gives it.
        kinds: each step's kind (``"prefill"``/``"decode"``/``"idle"`` or their letters).
        page_size: tokens per page.
    Raises:
        ValueError: the record is inconsistent (a row entry that skips an index, or that
            appears at another step than its token count says).
    """
    lives = _lifetimes(record["lengths"])
    current: dict[int, int] = {}  # rid -> index of its open lifetime
    by_start = defaultdict(list)
    for i, life in enumerate(lives):
        by_start[life.start].append(i)
    rows = record["rows"]
    set_at: list[list[int]] = [[] for _ in lives]
    row_events: dict[int, list[tuple[int, int, int, bool]]] = defaultdict(list)
    cursor = 0
    for s, rid, k, page in zip(rows["step"], rows["rid"], rows["index"], rows["page"], strict=True):
        while cursor < len(lives) and lives[cursor].start <= s:
            current[lives[cursor].rid] = cursor
            cursor += 1
        li = current[rid]
        life = lives[li]
        first = k == len(life.pages)
        if first:
            life.pages.append(page)
            set_at[li].append(s)
        elif k < len(life.pages):
            life.fixes.append((s, k, page))
        else:
            raise ValueError(f"request {rid}'s row entry {k} set at step {s} skips an index")
        row_events[s].append((li, k, page, first))
    decoded = _decoded(kinds)
    for li, life in enumerate(lives):
        expect = _appear_steps(life, decoded, page_size)
        if not np.array_equal(expect, set_at[li]):
            raise ValueError(f"request {life.rid}'s row pages appear at steps {set_at[li][:8]}, "
                             f"its token counts say {expect[:8].tolist()}")
    groups = _groups(record, lives, row_events)
    return {
        "life": [[life.rid, life.start - (lives[i - 1].start if i else 0),
                  -1 if life.end is None else life.end - life.start, life.tokens,
                  [v for j, (s, t) in enumerate(life.exceptions)
                   for v in (s - (life.exceptions[j - 1][0] if j else life.start), t)],
                  np.diff(life.pages, prepend=0).tolist()]
                 for i, life in enumerate(lives)],
        "fix": [v for li, life in enumerate(lives) for s, k, page in life.fixes
                for v in (li, s, k, page)],
        "grp": groups,
    }


def _groups(record: dict[str, Any], lives: list[Lifetime],
            row_events: dict[int, list[tuple[int, int, int, bool]]]) -> list[int]:
    """The owner changes the replay rule does not give, as slices of rows (see module)."""
    changes: dict[int, dict[int, int]] = defaultdict(dict)
    for s, page, owner in zip(record["step"], record["page"], record["owner"], strict=True):
        changes[s][page] = owner
    where: dict[int, tuple[int, int]] = {}  # page -> (lifetime, k) of the row it was last in
    owner_now: dict[int, int] = {}
    out: list[int] = []
    last = 0
    for s in sorted(set(changes) | set(row_events)):
        rule: dict[int, int] = {}
        for li, k, page, first in row_events.get(s, ()):
            where[page] = (li, k)
            if first and s > lives[li].start:
                rule[page] = lives[li].rid
        act = changes.get(s, {})
        residual: dict[int, list[int]] = defaultdict(list)
        for page in set(act) | set(rule):
            want = act.get(page, owner_now.get(page, -1))
            if rule.get(page, owner_now.get(page, -1)) != want:
                residual[want].append(page)
            owner_now[page] = want
        if not residual:
            continue
        out += [s - last, len(residual)]
        last = s
        for owner, pages in sorted(residual.items()):
            out += [owner, *_slices(pages, where, lives, s)]
    return out


def _slices(pages: list[int], where: dict[int, tuple[int, int]], lives: list[Lifetime],
            step: int) -> list[int]:
    """``pages`` as ``[slices, (lifetime, k, count)..., explicit, page ids...]``."""
    placed = sorted((where[p], p) for p in pages if p in where)
    slices: list[list[int]] = []
    explicit = [p for p in pages if p not in where]
    rows: dict[int, list[int]] = {}
    for (li, k), page in placed:
        row = rows.setdefault(li, lives[li].pages_at(step))
        if k >= len(row) or row[k] != page:
            explicit.append(page)
        elif slices and slices[-1][0] == li and slices[-1][1] + slices[-1][2] == k:
            slices[-1][2] += 1
        else:
            slices.append([li, k, 1])
    return [len(slices), *(v for sl in slices for v in sl), len(explicit), *sorted(explicit)]


def decode_pages(enc: dict[str, Any], kinds: Sequence[str], page_size: int,
                 num_pages: int) -> dict[str, Any]:
    """Inverse of :func:`encode_pages`: ``{"lifetimes": [Lifetime], "changes": {"step",
    "page", "owner"}}``, the owner changes one per page and step (no-ops dropped), in step
    order. :func:`owners_at` and :func:`rows_at` read a step from it."""
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
    decoded = _decoded(kinds)
    per_step: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for life in lives:
        for page, s in zip(life.pages, _appear_steps(life, decoded, page_size).tolist(),
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
            "num_pages": num_pages, "decoded": decoded}


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
