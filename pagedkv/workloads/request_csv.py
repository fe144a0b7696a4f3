"""Read the rows of a CSV requests file: a header naming the columns, then one request a row.

An empty cell is a missing value; ``prompt_token_ids`` and ``output_token_ids`` are integers
separated by spaces; ``ignore_eos`` is ``true``, ``false``, ``1`` or ``0``. The header is
checked once: each column named once, a prompt and an output column among them, and no name
that looks like a mistyped field (:class:`~pagedkv.workloads.request_fields.ExtraNames`);
other columns are left out of the rows. The rows go on to
:class:`~pagedkv.workloads.request_rows.RequestFileBuilder`, which checks their values.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import TextIO

from pagedkv.errors import bad_value
from pagedkv.workloads.request_fields import FIELD_SET, ExtraNames

_INT_COLUMNS = ("prompt_len", "output_len", "max_new_tokens", "turn")
_ID_COLUMNS = ("prompt_token_ids", "output_token_ids")


def csv_rows(f: TextIO, path: str, names: ExtraNames) -> Iterator[tuple[int, dict[str, object]]]:
    """``(line number, typed row)`` for each data row after the header, with only the
    columns that are fields (``names`` checks the others and keeps them for the notes)."""
    reader = csv.DictReader(f, skipinitialspace=True)
    try:
        header = reader.fieldnames or []
        _check_header(f"{path} line 1 (CSV header)", header, names)
        fields = [k for k in header if k in FIELD_SET]
        for raw in reader:
            n = reader.line_num
            if None in raw:
                raise bad_value(f"{path} line {n}", ",".join(raw[None]), f"at most {len(header)} "
                                "cells, one per header column")
            yield n, {k: _cell(f"{path} line {n}", k, v) for k in fields if (v := raw[k]) not in (None, "")}
    except csv.Error as exc:
        raise bad_value(f"{path} line {reader.line_num}", str(exc), "CSV text") from None


def _check_header(where: str, header: list[str], names: ExtraNames) -> None:
    """A CSV header names each column once, a prompt and an output column among them, and
    no mistyped field (``names.check``). Raises ConfigError naming the column."""
    names.check(where, header)
    twice = next((k for i, k in enumerate(header) if k in header[:i]), None)
    if twice is not None:  # csv.DictReader would keep the last one's cells, silently
        raise bad_value(f"{where}: column", twice, "each column once (it is there twice)")
    if not ({"prompt_len", "prompt_token_ids"} & set(header)
            and {"output_len", "output_token_ids"} & set(header)):
        raise bad_value(where, ",".join(header), "column names including prompt_len or "
                        "prompt_token_ids, and output_len or output_token_ids")


def _cell(where: str, column: str, text: str) -> object:
    """A CSV cell as the JSON value it stands for."""
    try:
        if column in _INT_COLUMNS:
            return int(text)
        if column in _ID_COLUMNS:
            return [int(t) for t in text.split()]
        if column == "arrival_s":
            return float(text)
    except ValueError:
        kind = ("integers separated by spaces" if column in _ID_COLUMNS
                else "an integer" if column in _INT_COLUMNS else "a number")
        raise bad_value(f"{where}: {column}", text, kind) from None
    if column == "ignore_eos":
        value = {"true": True, "false": False, "1": True, "0": False}.get(text.lower())
        if value is None:
            raise bad_value(f"{where}: ignore_eos", text, "true, false, 1 or 0")
        return value
    return text
