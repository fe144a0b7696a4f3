"""Read ShareGPT-format JSON: conversations between a user and an assistant.

The format SGLang's ``bench_serving`` reads (``python/sglang/benchmark/datasets/sharegpt.py``
in 0.5.23)::

    [{"id": "x1", "conversations": [{"from": "human", "value": "..."},
                                    {"from": "gpt", "value": "..."}, ...]}, ...]

(``conversation`` is accepted for ``conversations``, and OpenAI-style ``role``/``content``
for ``from``/``value``; roles ``human``/``user``, ``gpt``/``assistant``/``chatgpt``/
``bard``/``bing``, ``system``.) Each user message that the assistant answers is one request:
its prompt is the conversation so far (a system message, the earlier turns and their
answers, the new message), its output the answer. With ``turns="all"`` (the default) every
turn is a request and is sent when the turn before it has answered, so the radix cache can
reuse the resent history; with ``turns="first"`` only each conversation's first turn, as
``bench_serving`` does.

Where this differs from ``bench_serving``: it shuffles the file, samples ``--num-prompts``
and drops pairs with fewer than 2 prompt or output tokens (or longer than
``--sharegpt-context-len``); here the file's order is kept, every answered turn is a
request, a turn whose prompt or answer is empty is skipped (and counted in the notes), and a turn
longer than the model's context is an error.

Token counts. With a tokenizer (a local Hugging Face tokenizer folder, and ``transformers``
installed) each message is encoded alone, without special tokens or a chat template, and a
prompt's ids are its messages' ids one after the other: a later turn's prompt starts with
exactly the earlier turn's prompt and answer. Without one, a message of ``c`` characters
counts ``ceil(c / chars_per_token)`` tokens (default 4 characters per token, the usual rule
of thumb for English text and BPE tokenizers) and the ids are made up
(:meth:`~pagedkv.workloads.request_rows.RequestFile.specs`); the notes say which was used.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import TextIO

from pagedkv.errors import bad_value
from pagedkv.workloads.request_rows import RequestFile, RequestFileBuilder

USER_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
DEFAULT_CHARS_PER_TOKEN = 4.0
Encode = Callable[[str], list[int]]


def has_tokenizer(folder: str) -> bool:
    """Whether ``folder`` holds Hugging Face tokenizer files."""
    return os.path.isdir(folder) and any(os.path.isfile(os.path.join(folder, f)) for f in TOKENIZER_FILES)


def load_tokenizer(folder: str) -> Encode:
    """``text -> token ids`` from a local Hugging Face tokenizer folder (no download).

    Raises:
        ConfigError: no tokenizer files there, ``transformers`` missing, or it cannot load them.
    """
    if not has_tokenizer(folder):
        raise bad_value("--tokenizer", folder, f"a folder holding one of {', '.join(TOKENIZER_FILES)}")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise bad_value("--tokenizer", folder, "a tokenizer folder, with transformers installed "
                        "(pip install transformers)") from None
    try:
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... by file
        raise bad_value("--tokenizer", folder, f"a tokenizer transformers can load "
                        f"({type(exc).__name__}: {exc})") from None
    return lambda text: tok.encode(text, add_special_tokens=False)


def read_sharegpt(f: TextIO, path: str, *, context_len: int | None = None,
                  tokenizer: str | None = None, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
                  turns: str = "all") -> RequestFile:
    """The requests of a ShareGPT file (see the module docstring).

    Args:
        f, path: the open file and its name (for messages).
        context_len: the model's context length, tokens: a longer turn is refused.
        tokenizer: a local tokenizer folder, or None for the characters-per-token estimate.
        chars_per_token: characters per token of the estimate, > 0.
        turns: ``all`` or ``first``.

    Raises:
        ConfigError: not JSON (an integer of over 4300 digits, which Python refuses to parse,
            included; naming the line), not a list of records (an object: a record where a
            list was meant), a record without a list of messages, a message without text (naming
            the record, from 1, and message), no answered turn in the whole file (saying how
            many records gave none, and why), a bad option.
    """
    if turns not in ("all", "first"):
        raise bad_value("--sharegpt-turns", turns, "all, first")
    if not (isinstance(chars_per_token, (int, float)) and math.isfinite(chars_per_token)
            and chars_per_token > 0):
        raise bad_value("--chars-per-token", chars_per_token, "a finite number > 0")
    encode = load_tokenizer(tokenizer) if tokenizer is not None else None
    data = parse_sharegpt(f.read(), path)
    builder = RequestFileBuilder(path, context_len)
    skipped = unanswered = all_empty = 0
    for ci, conv in enumerate(data, 1):
        where = f"{path} record {ci}"
        msgs = conv.get("conversations", conv.get("conversation")) if isinstance(conv, dict) else None
        if not isinstance(msgs, list):
            raise bad_value(f"{where}: conversations", _kind(conv if msgs is None else msgs, keys=True),
                            'a list of messages ({"from": ..., "value": ...}) under the key '
                            '"conversations"')
        before = len(builder)
        cid = str(conv.get("id", ci))
        empty = _add_conversation(builder, where, ci, cid, msgs, encode, chars_per_token,
                                  turns == "first")
        skipped += empty
        if len(builder) == before:  # why this record gave no request, said if none does
            all_empty, unanswered = all_empty + (empty > 0), unanswered + (empty == 0)
    if not len(builder):
        why = [f"{unanswered} with no human turn followed by a gpt turn"] if unanswered else []
        why += [f"{all_empty} whose answered turns all have an empty prompt or answer"] if all_empty else []
        raise bad_value("--requests-file", path, f"a file with at least one request; its {len(data)} "
                        f"ShareGPT record(s) gave none{': ' if why else ''}{', '.join(why)}")
    if encode is not None:
        notes = [f"token counts: tokenizer in {tokenizer} (each message encoded alone, no chat template)"]
    else:
        notes = [f"token counts: estimated at {chars_per_token:g} characters per token (no "
                 "tokenizer: give --tokenizer DIR, a local Hugging Face tokenizer folder, "
                 "with transformers installed)"]
    if skipped:
        notes.append(f"skipped {skipped} turn(s) with an empty prompt or answer")
    return builder.done(notes)


def parse_sharegpt(text: str, path: str) -> list[object]:
    """The list of records of a ShareGPT file's text.

    Raises:
        ConfigError: not JSON (naming the line and column, or the line of an integer of over
            4300 digits, which Python refuses to parse), more than one JSON value (JSON Lines
            of records), or a value that is not a list.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        start = max(text.rfind("\n", 0, exc.pos) + 1, exc.pos - 20)  # the text where it fails
        end = text.find("\n", exc.pos)
        near = text[start:min(start + 60, len(text) if end < 0 else end)]
        valid = f"ShareGPT JSON ({exc.msg}, column {exc.colno})"
        if exc.msg == "Extra data":  # a second value: records one per line, not in one list
            valid = ("ShareGPT JSON: one list of records, [{...}, {...}] (the file goes on after "
                     "its first JSON value: JSON Lines of records? put them in one list)")
        raise bad_value(f"{path} line {exc.lineno}", near, valid) from None
    except ValueError:  # json raises a plain ValueError for an integer of over 4300 digits
        big = re.search(r"\d{4301}", text)
        line = text.count("\n", 0, big.start() if big else 0) + 1
        raise bad_value(f"{path} line {line}", "an integer of over 4300 digits", "ShareGPT JSON "
                        "with integers of at most 4300 digits (Python parses no longer ones)") from None
    except RecursionError:  # nesting past Python's recursion limit: no position to report
        raise bad_value(path, "JSON nested too deep", "ShareGPT JSON with nesting Python can "
                        "parse") from None
    if not isinstance(data, list):
        start = len(text) - len(text.lstrip())
        line = text.count("\n", 0, start) + 1
        raise bad_value(f"{path} line {line}: top level", _kind(data, keys=True), "a ShareGPT file is a "
                        'JSON list of records ([{"conversations": [...]}, ...]), got '
                        f"{_kind(data)}")
    return data


def _kind(value: object, keys: bool = False) -> str:
    """What a JSON value is: ``an object`` (with ``keys``: ``an object with keys id,
    conversations``, the first 8), ``a string``, ..."""
    if isinstance(value, dict):
        if not keys or not value:
            return "an object" if value else "an empty object"
        names = list(map(str, value))
        return f"an object with keys {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _add_conversation(builder: RequestFileBuilder, where: str, ci: int, cid: str, msgs: list[object],
                      encode: Encode | None, chars_per_token: float, first_only: bool) -> int:
    """Add one conversation's answered turns; return how many were skipped (an empty
    prompt or answer: 0 tokens)."""
    history: list[int] = []  # token ids so far (with a tokenizer)
    history_len = 0
    pending: list[int] = []  # ids of the messages since the last answer
    pending_len, asked, skipped = 0, False, 0
    for mi, msg in enumerate(msgs, 1):
        role, text = _message(f"{where} message {mi}", msg)
        ids = encode(text) if encode is not None else None
        n = len(ids) if ids is not None else math.ceil(len(text) / chars_per_token)
        if role in ASSISTANT_ROLES and asked:
            if n == 0 or history_len + pending_len == 0:
                skipped += 1
            else:
                row: dict[str, object] = {"output_len": n}
                if ids is not None:
                    row["prompt_token_ids"], row["output_token_ids"] = history + pending, ids
                else:
                    row["prompt_len"] = history_len + pending_len
                if not first_only:
                    row["conversation_id"] = cid
                builder.add(ci, row, where=f"{where} message {mi}")
                if first_only:
                    return skipped
            if ids is not None:
                history += pending + ids
            history_len += pending_len + n
            pending, pending_len, asked = [], 0, False
        else:
            pending += ids or []
            pending_len += n
            asked = asked or role in USER_ROLES
    return skipped


def _message(where: str, msg: object) -> tuple[str, str]:
    """``(role, text)`` of one message, in either key style."""
    if isinstance(msg, dict):
        role = msg.get("from", msg.get("role"))
        text = msg.get("value", msg.get("content"))
        if isinstance(role, str) and isinstance(text, str):
            return role.lower(), text
    raise bad_value(where, json.dumps(msg)[:60], 'an object {"from": role, "value": text}')
