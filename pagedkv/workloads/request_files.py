"""Read a requests file: JSON Lines, CSV or ShareGPT JSON, one request per row.

JSON Lines: one JSON object per line (blank lines skipped), for example::

    {"prompt_len": 812, "output_len": 97, "arrival_s": 0.0}
    {"prompt_token_ids": [128000, 791, 4320], "output_len": 12, "max_new_tokens": 256}
    {"conversation_id": "c7", "turn": 2, "prompt_len": 1310, "output_len": 60}

CSV: a header row naming the same columns; an empty cell is a missing value; token ids are
written as integers separated by spaces. ShareGPT: see :mod:`pagedkv.workloads.sharegpt`.
The columns and the rules for conversations are :class:`~pagedkv.workloads.request_rows.
RequestFileBuilder`'s; a name that is not a column is refused if it looks like a mistyped
one, else ignored and named in the notes (:mod:`pagedkv.workloads.request_fields`).

The text is UTF-8, with or without a byte-order mark (Excel's "CSV UTF-8" writes one): it is
read as ``utf-8-sig``, so the mark is never part of the first column's name or the first
line. The format comes from ``fmt`` or else the file's name (``.jsonl``/``.ndjson``,
``.csv``); a ``.json`` file (or any other name) is ShareGPT if it starts with ``[``, or with
``{`` and holds a ``"conversations"`` list but no prompt field (a ShareGPT record where a
list was meant: the ShareGPT reader says so); JSON Lines if it starts with ``{``; else CSV.
Every problem is a :class:`~pagedkv.errors.ConfigError` naming the file, the line, the
field, the value and what is valid.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator
from itertools import chain, repeat
from typing import TextIO

import numpy as np

from pagedkv.errors import ConfigError, bad_value
from pagedkv.workloads.request_csv import csv_rows
from pagedkv.workloads.request_fields import ExtraNames
from pagedkv.workloads.request_rows import NO_CONVERSATION, PLAIN_KEYS, RequestFile, RequestFileBuilder

_CHUNK = 65_536  # JSON Lines lines parsed by one json.loads call
_NONE = type(None)

FORMATS = ("jsonl", "csv", "sharegpt")
_SHAREGPT_HEAD = re.compile(r'"conversations?"\s*:\s*\[')  # a record's list of messages
_ROW_HEAD = re.compile(r'"prompt_(len|token_ids)"\s*:')


def detect_format(path: str, head: str) -> str:
    """``jsonl``, ``csv`` or ``sharegpt`` from the file name, else its first characters
    (``head``, the text after any byte-order mark; see the module docstring)."""
    name = path.lower()
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    first = head.lstrip()[:1]
    if first == "{" and _SHAREGPT_HEAD.search(head) and not _ROW_HEAD.search(head):
        return "sharegpt"  # an object, not a list: the ShareGPT reader names the mistake
    return {"[": "sharegpt", "{": "jsonl"}.get(first, "csv")


def open_requests(path: str) -> TextIO:
    """Open ``path`` for reading as UTF-8, a leading byte-order mark skipped (``utf-8-sig``:
    also after ``seek(0)``); a missing file or a folder is a named error."""
    if not os.path.isfile(path):
        raise bad_value("--requests-file", path, "an existing file (JSON Lines, CSV or ShareGPT JSON)")
    return open(path, encoding="utf-8-sig", newline="")


def load_requests(path: str, fmt: str | None = None, *, context_len: int | None = None,
               **sharegpt_options: object) -> RequestFile:
    """Read every request of a requests file.

    Args:
        path: the file.
        fmt: ``jsonl``, ``csv`` or ``sharegpt`` (default: :func:`detect_format`).
        context_len: the model's context length, tokens: a longer request is refused.
        sharegpt_options: for ShareGPT only: ``tokenizer`` (a folder), ``chars_per_token``,
            ``turns`` (see :func:`pagedkv.workloads.sharegpt.read_sharegpt`).

    Raises:
        ConfigError: a missing or empty file, text that is not UTF-8, JSON or CSV, a
            mistyped column name, a bad row (its line, field, value and the valid range),
            arrival times out of order, turns of a conversation out of order.
    """
    if fmt is not None and fmt not in FORMATS:
        raise bad_value("--requests-format", fmt, ", ".join(FORMATS))
    with open_requests(path) as f:
        try:
            head = f.read(4096)
            f.seek(0)
            if not head.strip():
                raise bad_value("--requests-file", path, "a file with at least one request (it is empty)")
            fmt = fmt or detect_format(path, head)
            if fmt == "sharegpt":
                from pagedkv.workloads.sharegpt import read_sharegpt

                return read_sharegpt(f, path, context_len=context_len, **sharegpt_options)
            read = _jsonl_rows if fmt == "jsonl" else csv_rows
            names = ExtraNames("key" if fmt == "jsonl" else "column")
            fast = _jsonl_plain_columns(f.read()) if fmt == "jsonl" else None
            if fast is None:
                f.seek(0)
                fast = _plain_columns(read(f, path, names))
            if fast is not None and (reqs := plain_requests(path, context_len, *fast)) is not None:
                reqs.notes.extend(names.notes())
                return reqs
            f.seek(0)  # irregular rows, or a bad value: row by row, naming the first bad line
            builder = RequestFileBuilder(path, context_len)
            for line, row in read(f, path, names):
                builder.add(line, row)
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
    if not len(builder):  # only a CSV header: JSON Lines has a row on its non-blank line
        raise bad_value("--requests-file", path, "a file with at least one request (the CSV has "
                        "a header, line 1, and no rows)")
    return builder.done(names.notes())


def _not_utf8(path: str) -> ConfigError:
    """The error for a file that is not UTF-8, naming the line and byte of the first bad
    byte (the decoder's own offset counts from the chunk it was given, not the file)."""
    with open(path, "rb") as raw:
        data = raw.read()
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        start, reason, bad = skip + exc.start, exc.reason, data[skip + exc.start:skip + exc.end]
    else:  # cannot happen: the text reader failed on these bytes
        start, reason, bad = 0, "not UTF-8", b""
    line = data.count(b"\n", 0, start) + 1
    return bad_value(f"{path} line {line}", bad,
                     f"UTF-8 text ({reason} at byte {start}; save the file as UTF-8)")


def _plain_columns(rows: Iterator[tuple[int, dict[str, object]]]) -> tuple[list[object], ...] | None:
    """``(lines, prompt_len, output_len, max_new_tokens, arrival_s, ignore_eos)`` lists if
    every row has only those keys (None where a row lacks one), else None as soon as one
    has others."""
    cols: tuple[list[object], ...] = ([], [], [], [], [], [])
    line, prompt, output, cap, arrival, eos = cols
    for n, row in rows:
        if not row.keys() <= PLAIN_KEYS:
            return None
        line.append(n)
        prompt.append(row.get("prompt_len"))
        output.append(row.get("output_len"))
        cap.append(row.get("max_new_tokens"))
        arrival.append(row.get("arrival_s"))
        eos.append(row.get("ignore_eos"))
    return cols


def _jsonl_plain_columns(text: str) -> tuple[list[object], ...] | None:
    """:func:`_plain_columns` of a JSON Lines text, parsed ``_CHUNK`` lines at a time as one
    JSON array (one ``json.loads`` call, in C, instead of one per line: three times faster);
    None if the text is anything but one object with only :data:`PLAIN_KEYS` on each
    non-blank line, and the caller reads it line by line (which names the bad line).

    Exactly the rows :func:`_jsonl_rows` gives: the text is split where it splits (``\\n``;
    a text with ``\\r`` other than in ``\\r\\n`` is left to it), blank lines are the ones
    it skips, and an array of as many objects as lines, each of plain keys, can only come
    from one object per line: a plain row's values are scalars, and a scalar, a key or an
    object's brace split across lines joins into invalid JSON (``1,2`` in an object,
    ``1,}``), so no row spans lines and none shares one (plain_requests refuses any value
    but a scalar)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            return None
    lines = text.split("\n")
    if all(map(str.strip, lines[:-1])):  # no blank line but the empty one after the last \n
        kept, numbers = lines[:-1] if not lines[-1].strip() else lines, None
    else:
        numbers = [n for n, t in enumerate(lines, 1) if t.strip()]
        kept = [lines[n - 1] for n in numbers]
    cols: tuple[list[object], ...] = ([], [], [], [], [], [])
    _, prompt, output, cap, arrival, eos = cols
    for lo in range(0, len(kept), _CHUNK):
        part = kept[lo:lo + _CHUNK]
        try:
            rows = json.loads("[" + ",".join(part) + "]")
        except (ValueError, RecursionError):  # not JSON, or an integer of over 4300 digits
            return None
        # every row a dict of plain keys; the checks and the columns in C (map), not per row
        if len(rows) != len(part) or set(map(type, rows)) != {dict} \
                or not set(chain.from_iterable(rows)) <= PLAIN_KEYS:
            return None
        for column, key in ((prompt, "prompt_len"), (output, "output_len"), (cap, "max_new_tokens"),
                            (arrival, "arrival_s"), (eos, "ignore_eos")):
            column.extend(map(dict.get, rows, repeat(key)))
    cols[0].extend(range(1, len(kept) + 1) if numbers is None else numbers)
    return cols


def _jsonl_rows(f: TextIO, path: str, names: ExtraNames) -> Iterator[tuple[int, dict[str, object]]]:
    """``(line number, object)`` for each non-blank line, without the keys that are not
    fields (``names`` checks them and keeps their names for the notes)."""
    for n, text in enumerate(f, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            raise bad_value(f"{path} line {n}", _clip(text), f"one JSON object per line ({exc.msg}, "
                            f"column {exc.colno})") from None
        except ValueError:  # Python refuses to parse an integer of over 4300 digits
            raise bad_value(f"{path} line {n}", _clip(text), "one JSON object per line, with "
                            "integers of at most 4300 digits") from None
        if not isinstance(row, dict):
            raise bad_value(f"{path} line {n}", _clip(text), "a JSON object ({...})")
        yield n, names.keep(f"{path} line {n}", row)


def _clip(text: str, n: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= n else text[:n] + "..."


def plain_requests(source: str, context_len: int | None, line: list[int], prompt: list[object],
                   output: list[object], cap: list[object], arrival: list[object],
                   ignore_eos: list[object]) -> RequestFile | None:
    """The requests of a file whose every row has only :data:`PLAIN_KEYS`, checked column by
    column with numpy (a million rows in well under a second); None if any value is off,
    and then :class:`RequestFileBuilder`, row by row, finds the first bad line and names it.

    Args are the rows' values in file order (None where a row has no such key).
    """
    n = len(line)
    kinds = {name: set(map(type, col)) for name, col in (  # in C: no Python loop per value
        ("prompt", prompt), ("output", output), ("cap", cap), ("arrival", arrival), ("eos", ignore_eos))}
    if not n or kinds["prompt"] | kinds["output"] != {int} or not kinds["cap"] <= {int, _NONE} \
            or not kinds["eos"] <= {bool, _NONE}:
        return None
    try:
        p, o = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
        c = np.asarray(cap if _NONE not in kinds["cap"] else
                       [o_ if v is None else v for v, o_ in zip(cap, output, strict=True)], dtype=np.int64)
    except OverflowError:  # a value past int64: RequestFileBuilder names it
        return None
    ok = (p >= 1).all() and (o >= 1).all() and (c >= o).all()
    if context_len is not None:  # o <= context_len - p: p + o could wrap past int64 unseen
        ok = ok and bool((o <= context_len - p).all())
    times = None
    if arrival[0] is not None:
        if not kinds["arrival"] <= {int, float}:
            return None
        try:
            times = np.asarray(arrival, dtype=np.float64)
        except OverflowError:  # an integer past float's range: RequestFileBuilder names it
            return None
        ok = ok and bool(np.isfinite(times).all() and times[0] >= 0 and (np.diff(times) >= 0).all())
    elif kinds["arrival"] != {_NONE}:
        return None
    if not ok:
        return None
    eos = (np.zeros(n, dtype=bool) if kinds["eos"] == {_NONE}
           else np.asarray([v is True for v in ignore_eos], dtype=bool))
    none = np.full(n, NO_CONVERSATION, dtype=np.int64)  # no conversation, no turn before
    return RequestFile(source, np.asarray(line, dtype=np.int64), p, o, c, times,
                         eos, none, none.copy(),
                         np.zeros(n, dtype=np.int64), [])
