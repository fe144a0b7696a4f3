"""Requests read from a requests file, checked row by row and kept column by column.

Every reader (:mod:`pagedkv.workloads.request_files` for JSON Lines and CSV,
:mod:`pagedkv.workloads.sharegpt` for ShareGPT JSON) hands each request to
:meth:`RequestFileBuilder.add` with where it came from (``"requests.csv line 7"``); a bad value is
refused there with that place, the field, the value and the valid range (a file of plain
rows, lengths and times only, is first checked column by column with numpy, and read row by
row only if that finds something to name). The result,
:class:`RequestFile`, keeps lengths and times as numpy columns (a million requests take
tens of MB) and makes the scheduler's entries (:class:`RequestEntry`, the fields of
:class:`~pagedkv.workloads.synthetic.RequestSpec`) one at a time (:meth:`RequestFile.specs`).

Conversations. A request with a ``conversation_id`` is a turn of that conversation; its turns
are 1, 2, 3, ... in file order (a ``turn``, if given, must be the next), and each is sent
once the turn before it has answered (``RequestSpec.follows``), or at its own ``arrival_s``
if that is later (``WaitingQueue.send_followers``: a user back after a pause). A chat client resends
the whole conversation every turn, so a later turn's prompt must be at least the earlier
turn's prompt plus its answer. When the file gives token ids they are used as they are;
when it gives only lengths, ids are made up so that a later turn's prompt starts with the
earlier turn's prompt and output ids, the rest being ids no other request shares: the radix
cache then matches exactly the resent history, as it would on a real server.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from pagedkv.errors import bad_value

NO_CONVERSATION = -1
_CHUNK = 65_536  # requests turned into Python values at a time by RequestFile.specs
PLAIN_KEYS = frozenset({"prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos"})
INT64_MAX = 2**63 - 1  # the columns are int64: a larger length or id cannot be kept
_MADE_UP_BASE = np.int64(1) << 50  # above any vocabulary and the scheduler's own made-up ids


def made_up_ids(rid: int, start: int, end: int) -> np.ndarray:
    """int64 ids for positions ``start .. end - 1`` of request ``rid`` of a conversation:
    ``2**50 + rid * 2**24 + position``, shared with no other request, no real token (ids
    are below 2**24 in every vocabulary) and none of the ids the scheduler makes up for
    requests without ids (below 2**50)."""
    return _MADE_UP_BASE + (np.int64(rid) << 24) + np.arange(start, end, dtype=np.int64)


def _count(where: str, name: str, value: object, minimum: int = 1, bound: str | None = None) -> int:
    """An integer from ``minimum`` to :data:`INT64_MAX` (bools and floats refused), else a
    named error (a larger one would overflow the int64 column, as an OverflowError);
    ``bound`` says what the minimum is (``"output_len (10)"``), default the number."""
    low = bound or str(minimum)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise bad_value(f"{where}: {name}", value, f"an integer >= {low}")
    if value > INT64_MAX:
        raise bad_value(f"{where}: {name}", value, f"an integer from {low} to {INT64_MAX} (2**63 - 1)")
    return int(value)


def _ids(where: str, name: str, value: object) -> np.ndarray:
    """A non-empty list of token ids (integers from 0 to :data:`INT64_MAX`) as int64."""
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= INT64_MAX
                       for t in value)):
        shown = value if not isinstance(value, (list, tuple)) or len(value) <= 8 else f"[{len(value)} items]"
        raise bad_value(f"{where}: {name}", shown,
                        "a non-empty list of token ids (integers from 0 to 2**63 - 1)")
    return np.asarray(value, dtype=np.int64)


def _length(where: str, row: dict[str, object], key: str) -> tuple[int, np.ndarray | None]:
    """``<key>_len`` and/or ``<key>_token_ids`` of a row: the length and the ids if given."""
    n, ids = row.get(f"{key}_len"), row.get(f"{key}_token_ids")
    if n is None and ids is None:
        raise bad_value(f"{where}: {key}_len", None, f"an integer >= 1 (or {key}_token_ids)")
    arr = None if ids is None else _ids(where, f"{key}_token_ids", ids)
    length = len(arr) if n is None else _count(where, f"{key}_len", n)
    if arr is not None and len(arr) != length:
        raise bad_value(f"{where}: {key}_len", length, f"len({key}_token_ids)={len(arr)}")
    return length, arr


def _seconds(value: int | float) -> float:
    """``value`` as a float; an integer too large for one (over ~1.8e308) is ``inf``."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


class RequestEntry(NamedTuple):
    """One request as the scheduler reads it: the fields of
    :class:`~pagedkv.workloads.synthetic.RequestSpec`, as a named tuple because a run makes
    one per request (a million of them four times faster than the frozen dataclass)."""

    prompt_len: int
    output_len: int
    max_new_tokens: int
    arrival_s: float
    input_ids: np.ndarray | None = None
    output_ids: np.ndarray | None = None
    follows: int | None = None
    ignore_eos: bool = False


@dataclass
class RequestFile:
    """A requests file's requests in file order (request ``i`` is the scheduler's ``rid = i``).

    Attributes:
        source: the file, as named to the user.
        line: int64 column: where each request is in the file (JSON Lines, CSV: its line,
            from 1; ShareGPT: its conversation's position in the list, from 1).
        prompt_len, output_len, max_new_tokens: int64 columns, tokens.
        arrival_s: float64 column of the file's arrival times (seconds), or None if it has none.
        ignore_eos: bool column.
        follows: int64 column: the request index of the turn before, -1 for none.
        conversation: int64 column: index into ``conversation_names``, -1 for none.
        turn: int64 column: turn within its conversation, from 1 (0 outside a conversation).
        conversation_names: the conversation ids as the file wrote them.
        prompt_ids, output_ids: token ids the file gave, by request index (absent: none).
        notes: what the reader assumed, to be said with the results (e.g. a token estimate).
    """

    source: str
    line: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    max_new_tokens: np.ndarray
    arrival_s: np.ndarray | None
    ignore_eos: np.ndarray
    follows: np.ndarray
    conversation: np.ndarray
    turn: np.ndarray
    conversation_names: list[str]
    prompt_ids: dict[int, np.ndarray] = field(default_factory=dict)
    output_ids: dict[int, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_len)

    def specs(self, arrivals: np.ndarray) -> Iterator[RequestEntry]:
        """The scheduler's entries, one at a time, with ``arrivals`` (seconds, one per
        request; a later turn is sent no earlier than the turn before it finishes). A
        shorter ``arrivals`` gives the first ``len(arrivals)`` requests.

        Token ids: the file's, else, for a turn of a conversation, :func:`made_up_ids` after
        the resent history (see the module docstring); a request outside any conversation
        without ids in the file carries none (the scheduler makes up unshared ones)."""
        if len(arrivals) > len(self):
            raise bad_value("len(arrivals)", len(arrivals), f"at most {len(self)} (one per request)")
        history: dict[int, np.ndarray] = {}  # conversation -> last turn's prompt + output ids
        times = np.asarray(arrivals, dtype=np.float64)
        for lo in range(0, len(times), _CHUNK):  # plain ints, a chunk at a time: fast and small
            hi = min(lo + _CHUNK, len(times))
            cols = (c[lo:hi].tolist() for c in (self.prompt_len, self.output_len, self.max_new_tokens,
                                               times, self.ignore_eos, self.follows, self.conversation))
            for i, (p, o, cap, t, eos, prev, conv) in enumerate(zip(*cols, strict=True), lo):
                ids, out = self.prompt_ids.get(i), self.output_ids.get(i)
                if conv != NO_CONVERSATION:
                    if ids is None:
                        sent = history.pop(conv) if prev >= 0 else np.zeros(0, dtype=np.int64)
                        ids = np.concatenate((sent, made_up_ids(i, len(sent), p)))
                    if out is None:
                        out = made_up_ids(i, p, p + o)
                    history[conv] = np.concatenate((ids, out))
                yield RequestEntry(p, o, cap, t, ids, out, None if prev < 0 else prev, eos)


def relative_arrivals(arrival_s: np.ndarray) -> tuple[np.ndarray, float]:
    """A file's arrival times (seconds, never decreasing) moved so that the first request
    arrives at t=0, and how far they moved: a trace stamped with wall-clock times (Unix
    seconds) would otherwise be replayed after decades of idle steps, and every rate in
    its report divided by them. SGLang's ``bench_serving`` also counts from the first send."""
    start = float(arrival_s[0]) if len(arrival_s) else 0.0
    return (arrival_s - start if start > 0 else arrival_s), max(start, 0.0)


class RequestFileBuilder:
    """Collects checked requests; :meth:`done` returns the :class:`RequestFile`.

    Args:
        source: the file's name as shown in messages.
        context_len: the model's context length in tokens; a request whose prompt plus
            output exceeds it is refused (None: no check).
    """

    def __init__(self, source: str, context_len: int | None = None) -> None:
        self.source = source
        self.context_len = context_len
        # array.array, not lists: 8 bytes a value, so a million requests stay compact
        self._cols: dict[str, array] = {k: array("q") for k in (
            "line", "prompt_len", "output_len", "max_new_tokens", "ignore_eos", "follows",
            "conversation", "turn")}
        self._cols["arrival_s"] = array("d")
        self._conv_index: dict[str, int] = {}
        self._conv_last: dict[int, tuple[int, int, int]] = {}  # conv -> (request, turn, p + o)
        self._has_times: bool | None = None
        self._last_time = 0.0
        self.prompt_ids: dict[int, np.ndarray] = {}
        self.output_ids: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._cols["line"])

    def add(self, line: int, row: dict[str, object], where: str | None = None) -> None:
        """Check one request and append it (``line``: its position, for the table;
        ``where``: its place for messages, default ``"<source> line <line>"``). ``row``
        keys: ``prompt_len`` and/or ``prompt_token_ids``, ``output_len`` and/or
        ``output_token_ids``, optional ``max_new_tokens`` (at least ``output_len``; default
        ``output_len``, as SGLang's ``bench_serving`` sends), ``arrival_s``, ``ignore_eos``,
        ``conversation_id``, ``turn`` (see the module docstring for conversations); others
        are ignored (the readers have already refused a mistyped one).

        Raises:
            ConfigError: naming ``where``, the field, the value and the valid range.
        """
        self._add_checked(where or f"{self.source} line {line}", line, row)

    def _add_checked(self, where: str, line: int, row: dict[str, object]) -> None:
        """Every check, each failure a named error (see :meth:`add`)."""
        rid = len(self)
        p, pids = _length(where, row, "prompt")
        o, oids = _length(where, row, "output")
        cap = row.get("max_new_tokens")
        # the client's cap on the answer: a cap below output_len would stop it before its end
        cap = o if cap is None else _count(where, "max_new_tokens", cap, minimum=o,
                                           bound=f"output_len ({o})")
        if self.context_len is not None and p + o > self.context_len:
            raise bad_value(f"{where}: prompt_len + output_len", p + o,
                            f"<= the model's context length, {self.context_len} tokens")
        self._add_time(where, row.get("arrival_s"))
        eos = row.get("ignore_eos", False)
        if not isinstance(eos, bool):
            raise bad_value(f"{where}: ignore_eos", eos, "true or false")
        conv, turn, follows = self._add_turn(where, row, p, o, pids is not None)
        for name, value in (("line", line), ("prompt_len", p), ("output_len", o), ("max_new_tokens", cap),
                            ("ignore_eos", eos), ("follows", follows), ("conversation", conv),
                            ("turn", turn)):
            self._cols[name].append(value)
        if pids is not None:
            self.prompt_ids[rid] = pids
        if oids is not None:
            self.output_ids[rid] = oids

    def _add_time(self, where: str, value: object) -> None:
        """Arrival times: on every request or on none, finite, >= 0, in file order."""
        has = value is not None
        if self._has_times is not None and has != self._has_times:
            raise bad_value(f"{where}: arrival_s", value, "given on every request or on none "
                            f"(the first request {'has' if self._has_times else 'has none'})")
        self._has_times = has
        if not has:
            return
        # a JSON integer past float's range is infinite seconds (float() would raise OverflowError)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(_seconds(value)) or value < 0:
            raise bad_value(f"{where}: arrival_s", value, "finite seconds >= 0")
        if value < self._last_time:
            raise bad_value(f"{where}: arrival_s", value, f">= {self._last_time}, the request "
                            "before it (arrival times in file order)")
        self._last_time = float(value)
        self._cols["arrival_s"].append(float(value))

    def _add_turn(self, where: str, row: dict[str, object], p: int, o: int,
                  has_ids: bool) -> tuple[int, int, int]:
        """``(conversation index, turn, follows)``; checks turn order and, when ids are to
        be made up, that the prompt has room for the resent history."""
        name = row.get("conversation_id")
        if name is None:
            if row.get("turn") is not None:
                raise bad_value(f"{where}: turn", row["turn"], "only with a conversation_id")
            return NO_CONVERSATION, 0, -1
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            raise bad_value(f"{where}: conversation_id", name, "a string or an integer")
        conv = self._conv_index.setdefault(str(name), len(self._conv_index))
        prev, prev_turn, history = self._conv_last.get(conv, (-1, 0, 0))
        turn = row.get("turn")
        if turn is not None and (type(turn) is not int or turn != prev_turn + 1):
            # a gap or a repeat is a lost or misplaced row: the turn would follow the wrong answer
            which = f"next turn of conversation {name!r} (turn {prev_turn} is on line " \
                f"{self._cols['line'][prev]}; " if prev >= 0 else f"first turn of conversation {name!r} ("
            raise bad_value(f"{where}: turn", turn, f"{prev_turn + 1}, the {which}a conversation's "
                            "turns are 1, 2, 3, ... in file order)")
        turn = prev_turn + 1
        if prev >= 0 and p < history and not has_ids:
            raise bad_value(f"{where}: prompt_len", p, f">= {history}, the turn before's prompt "
                            "+ output (a chat client resends the conversation so far)")
        self._conv_last[conv] = (len(self), turn, p + o)
        return conv, turn, prev

    def done(self, notes: list[str] | None = None) -> RequestFile:
        """The collected requests. Raises ConfigError if there are none."""
        if not len(self):
            raise bad_value("--requests-file", self.source, "a file with at least one request")
        c = self._cols
        i64 = {k: np.asarray(c[k], dtype=np.int64) for k in
               ("line", "prompt_len", "output_len", "max_new_tokens", "follows", "conversation",
                "turn")}
        return RequestFile(
            self.source, i64["line"], i64["prompt_len"], i64["output_len"], i64["max_new_tokens"],
            np.asarray(c["arrival_s"], dtype=np.float64) if self._has_times else None,
            np.asarray(c["ignore_eos"], dtype=bool), i64["follows"], i64["conversation"],
            i64["turn"], list(self._conv_index), self.prompt_ids, self.output_ids, list(notes or []))

