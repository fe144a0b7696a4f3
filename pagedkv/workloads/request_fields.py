"""The field names a JSON Lines or CSV requests file may use, and what is done with others.

A name that is not a field is either a likely mistake or an extra column. A mistake is an
error, since dropping it silently changes the run: ``arival_s`` would send every request at
t=0, ``max_tokens`` (OpenAI's name for ``max_new_tokens``) would cap each at its
``output_len``. A likely mistake is a near miss of a field's name (``difflib``, ratio >= 0.8,
case ignored) or a name other tools give one of the fields (:data:`ALIASES`). Any other name
(an ``id``, a ``text`` or ``prompt`` column, a ``model``) is left out of the requests and named
in the file's notes ("ignored columns: ..."), which the CLI prints with the results.

ShareGPT files are not checked here: their records carry extra keys (``id``, ``model``, ...)
by design, and the reader takes only the messages. A ShareGPT record met as a JSON Lines row
(a ``conversations`` list) is an error that says what a ShareGPT file is.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from pagedkv.errors import ConfigError, bad_value

FIELDS = ("prompt_len", "prompt_token_ids", "output_len", "output_token_ids", "max_new_tokens",
          "arrival_s", "ignore_eos", "conversation_id", "turn")
FIELD_SET = frozenset(FIELDS)
CLOSE = 0.8  # difflib ratio of a near miss: arival_s 0.94, arrival 0.88; prompt (a text) 0.75

# names other tools give a field: (the field, whose name it is; "" for a plain near miss)
ALIASES: dict[str, tuple[str, str]] = {
    "max_tokens": ("max_new_tokens", "OpenAI's"),
    "max_completion_tokens": ("max_new_tokens", "OpenAI's"),
    "max_output_tokens": ("max_new_tokens", "OpenAI's Responses API's"),
    "prompt_tokens": ("prompt_len", "OpenAI's usage"),
    "input_tokens": ("prompt_len", "Anthropic's usage"),
    "input_len": ("prompt_len", "bench_serving's"),
    "input_length": ("prompt_len", "the Mooncake trace's"),
    "completion_tokens": ("output_len", "OpenAI's usage"),
    "output_tokens": ("output_len", "Anthropic's usage"),
    "input_ids": ("prompt_token_ids", "SGLang's"),
    "output_ids": ("output_token_ids", "SGLang's"),
    "prompt_ids": ("prompt_token_ids", ""),
    "timestamp": ("arrival_s", ""),
    "arrival_time": ("arrival_s", ""),
    "session_id": ("conversation_id", ""),
    "conv_id": ("conversation_id", ""),
}
SHAREGPT_KEYS = frozenset({"conversations", "conversation"})
SHAREGPT_HINT = ("a request row; this is a ShareGPT record, and a ShareGPT file is one JSON list "
                 "of records ([{...}, {...}]), read with --requests-format sharegpt")


def likely_field(name: str) -> str | None:
    """The hint for a name that is probably meant as a field ("did you mean ...?"), else None."""
    key = name.strip().lower()
    if key in ALIASES:
        field, whose = ALIASES[key]
        return f"did you mean {field}?" + (f" {name} is {whose} name for it" if whose else "")
    match = difflib.get_close_matches(key, FIELDS, n=1, cutoff=CLOSE)
    return f"did you mean {match[0]}?" if match else None


def field_error(where: str, kind: str, name: str, hint: str) -> ConfigError:
    """``<where>: <kind>='arival_s' is invalid; valid: one of ... (did you mean arrival_s?)``."""
    return bad_value(f"{where}: {kind}", name, f"one of {', '.join(FIELDS)} ({hint})")


class ExtraNames:
    """Sorts the names a file uses that are not :data:`FIELDS`: a likely field is an error,
    any other is remembered (first seen first) for :meth:`notes`.

    Args:
        kind: what a name is called in messages: ``column`` (CSV) or ``key`` (JSON Lines).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.ignored: dict[str, None] = {}  # an ordered set

    def check(self, where: str, names: Iterable[str]) -> None:
        """Check every name of ``names`` that is not one of :data:`FIELDS`.

        Raises:
            ConfigError: a likely field (see the module docstring), naming ``where`` (the
                file and line), the name, the fields and the hint.
        """
        for name in names:
            if name in FIELD_SET or name in self.ignored:
                continue
            hint = likely_field(name)
            if hint is not None:
                raise field_error(where, self.kind, name, hint)
            self.ignored[name] = None

    def keep(self, where: str, row: dict[str, object]) -> dict[str, object]:
        """``row`` without the keys that are not fields (checked with :meth:`check`).

        Raises:
            ConfigError: as :meth:`check`, or the row is a ShareGPT record (a list of messages).
        """
        if row.keys() <= FIELD_SET:
            return row
        for key in SHAREGPT_KEYS & row.keys():
            if isinstance(row[key], list):  # messages: a ShareGPT record, not a row with a typo
                raise bad_value(f"{where}: {self.kind}", key, SHAREGPT_HINT)
        self.check(where, row)
        return {k: v for k, v in row.items() if k in FIELD_SET}

    def notes(self) -> list[str]:
        """``["ignored columns: id, text (not fields pagedkv reads)"]``, or [] if none."""
        if not self.ignored:
            return []
        names = ", ".join(repr(n) if not n.isprintable() or not n.strip() or "," in n else n
                          for n in self.ignored)
        return [f"ignored columns: {names} (not fields pagedkv reads)"]
