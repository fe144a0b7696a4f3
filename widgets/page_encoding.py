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

- ``loop``, ``ahead``, ``unseen``: what the overlap loop leaves half done after each step
  (:mod:`pagedkv_widgets.in_flight_encoding`);
- ``swa`` (a sliding-window hybrid only): the SWA pool's owner changes
  (:mod:`pagedkv_widgets.swa_encoding`); the lists above are then the full pool's.
- ``state_slots`` (a linear-attention hybrid only): the state pool's parts per step
  (:mod:`pagedkv_widgets.state_slots`).

Replay rule, at each step: first every row page that appeared at this step, after the
lifetime's first step, becomes its request's own; then each group sets its pages' owner.
:func:`pagedkv_widgets.page_decoding.decode_pages` replays it (the JavaScript ``decodePages``
is its twin); tests check that it gives back every owner change, row and token count of the
record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np

from pagedkv_widgets.in_flight_encoding import encode_in_flight
from pagedkv_widgets.page_decoding import Lifetime, appear_steps, decoded_steps
from pagedkv_widgets.state_slots import encode_state_slots
from pagedkv_widgets.swa_encoding import encode_swa


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
    row_li: list[int] = []
    row_first: list[bool] = []
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
        row_li.append(li)
        row_first.append(first)
    decoded = decoded_steps(kinds)
    for li, life in enumerate(lives):
        expect = appear_steps(life, decoded, page_size)
        if not np.array_equal(expect, set_at[li]):
            raise ValueError(f"request {life.rid}'s row pages appear at steps {set_at[li][:8]}, "
                             f"its token counts say {expect[:8].tolist()}")
    ev = {"step": np.asarray(rows["step"], dtype=np.int64), "li": np.asarray(row_li, dtype=np.int64),
          "k": np.asarray(rows["index"], dtype=np.int64), "page": np.asarray(rows["page"], dtype=np.int64),
          "first": np.asarray(row_first, dtype=bool)}
    groups = _groups(record, lives, ev)
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
        **encode_in_flight(record),
        **({"swa": encode_swa(record["swa"])} if "swa" in record else {}),
        **({"state_slots": encode_state_slots(record["state_slots"])}
           if "state_slots" in record else {}),
    }


def _last(step: np.ndarray, key: np.ndarray, *values: np.ndarray) -> list[np.ndarray]:
    """The last entry of each ``(step, key)`` pair, in the given order (a dict's "last write
    wins"), sorted by step then key: ``[step, key, *values]``."""
    if not len(step):
        return [step, key, *values]
    width = int(key.max()) + 1
    combined = step * width + key
    rev = combined[::-1]
    _, first = np.unique(rev, return_index=True)  # first in reverse: last in order
    pick = len(combined) - 1 - first
    return [a[pick] for a in (step, key, *values)]


def _latest(keys: np.ndarray, steps: np.ndarray, at_keys: np.ndarray, at_steps: np.ndarray,
            before: bool) -> np.ndarray:
    """For each ``(at_key, at_step)``: the index of the last entry with the same key and a
    step ``< at_step`` (``before``) or ``<= at_step``, in step then given order; -1 if none."""
    if not len(keys):
        return np.full(len(at_keys), -1, dtype=np.int64)
    span = int(max(steps.max(), at_steps.max() if len(at_steps) else 0)) + 2
    combined = keys * span + steps
    order = np.argsort(combined, kind="stable")
    query = at_keys * span + at_steps
    j = np.searchsorted(combined[order], query, side="left" if before else "right") - 1
    found = (j >= 0) & (keys[order[np.maximum(j, 0)]] == at_keys)
    return np.where(found, order[np.maximum(j, 0)], -1)


def _groups(record: dict[str, Any], lives: list[Lifetime], ev: dict[str, np.ndarray]) -> list[int]:
    """The owner changes the replay rule does not give, as slices of rows (see module).

    ``ev``: the row entries set, in record order (``step``, ``li`` lifetime, ``k``,
    ``page``, ``first``: the entry's first setting). Done for all steps at once: a page's
    owner before a step is the last owner change recorded for it, so whether the replay rule
    gets a change right needs no step-by-step replay.
    """
    i64 = partial(np.asarray, dtype=np.int64)
    starts, rids = i64([life.start for life in lives]), i64([life.rid for life in lives])
    a_s, a_p, a_o = _last(i64(record["step"]), i64(record["page"]), i64(record["owner"]))
    rule = ev["first"] & (ev["step"] > starts[ev["li"]]) if len(ev["li"]) else ev["first"]
    r_s, r_p, r_o = _last(ev["step"][rule], ev["page"][rule], rids[ev["li"][rule]])
    # every (step, page) either names, with what each says its owner becomes
    s = np.concatenate([a_s, r_s])
    p = np.concatenate([a_p, r_p])
    s, p = _last(s, p)
    prev_i = _latest(a_p, a_s, p, s, before=True)
    prev = np.where(prev_i >= 0, a_o[np.maximum(prev_i, 0)], -1)  # FREE before any change

    def said(ks: np.ndarray, kp: np.ndarray, owners: np.ndarray) -> np.ndarray:
        i = _latest(kp, ks, p, s, before=False)
        hit = (i >= 0) & (ks[np.maximum(i, 0)] == s) if len(ks) else np.zeros(len(p), bool)
        return np.where(hit, owners[np.maximum(i, 0)] if len(owners) else prev, prev)

    want, rule_gives = said(a_s, a_p, a_o), said(r_s, r_p, r_o)
    off = want != rule_gives
    s, p, o = s[off], p[off], want[off]
    # where each page sits in a row as of its step, and whether that entry still holds it
    w = _latest(ev["page"], ev["step"], p, s, before=False)
    li = np.where(w >= 0, ev["li"][np.maximum(w, 0)], -1)
    k = np.where(w >= 0, ev["k"][np.maximum(w, 0)], -1)
    base = np.concatenate([[0], np.cumsum([len(life.pages) for life in lives])]).astype(np.int64)
    entry_ev = base[ev["li"]] + ev["k"] if len(ev["li"]) else ev["k"]
    e = _latest(entry_ev, ev["step"], np.where(w >= 0, base[np.maximum(li, 0)] + k, -1), s,
                before=False)
    placed = (w >= 0) & (e >= 0) & (ev["page"][np.maximum(e, 0)] == p) if len(p) else w >= 0
    order = np.lexsort((p, k, li, ~placed, o, s))  # per step, owner: slices by row, then the rest
    s, p, o, li, k, placed = (a[order] for a in (s, p, o, li, k, placed))
    n = len(s)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (s[1:] != s[:-1]) | (o[1:] != o[:-1])
    new_slice = placed & (new_group | ~np.roll(placed, 1) | (li != np.roll(li, 1))
                          | (k != np.roll(k, 1) + 1))
    groups = [*np.flatnonzero(new_group).tolist(), n]
    starts = np.flatnonzero(new_slice)
    slice_end = np.searchsorted(starts, np.arange(n + 1))  # slices starting before i
    s, p, o, li, k = (a.tolist() for a in (s, p, o, li, k))
    n_placed = np.concatenate([[0], np.cumsum(placed)]).tolist()
    starts = [*starts.tolist(), n]
    out: list[int] = []
    last = head = 0
    for g, g1 in pairwise(groups):
        if g == 0 or s[g] != s[g - 1]:
            head = len(out)
            out += [s[g] - last, 0]
            last = s[g]
        out[head + 1] += 1
        used = g + n_placed[g1] - n_placed[g]  # the group's placed entries come first
        first, stop = int(slice_end[g]), int(slice_end[used])
        out += [o[g], stop - first]
        for j in range(first, stop):
            a = starts[j]
            out += [li[a], k[a], min(starts[j + 1], used) - a]
        out += [g1 - used, *p[used:g1]]
    return out
