"""The whole-text JSON Lines reader (one ``json.loads`` per block of lines) against the line by
line reader: the same requests from the same file, and the same error for a bad one."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pagedkv.workloads.request_files as request_files
from pagedkv.errors import ConfigError
from pagedkv.workloads.request_files import load_requests

COLUMNS = ("line", "prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos",
           "follows", "conversation", "turn")

plain = st.fixed_dictionaries(
    {"prompt_len": st.integers(1, 50), "output_len": st.integers(1, 9)},
    optional={"max_new_tokens": st.integers(1, 30), "ignore_eos": st.sampled_from([True, False, None]),
              "arrival_s": st.sampled_from([0, 0.5, 1, 2.25])})
# lines that are not one plain row: each must send the reader back to the line by line path
odd = st.sampled_from([
    "", "   ", "\t", '{"prompt_len": 3, "output_len": 2}, {"prompt_len": 4, "output_len": 1}',
    '{"prompt_len": 3, "output_len":', '2}', '{"prompt_len": 3.0, "output_len": 2}',
    '{"prompt_len": 3, "output_len": 2, "conversation_id": "c"}', '[1, 2]', "7",
    '{"prompt_len": true, "output_len": 2}', '{"prompt_len": 3, "output_len": 2, "arrival_s": NaN}',
    '{"prompt_len": 3, "output_len": 2, "max_new_tokens": 1}', '{"prompt_len": 3, "output_len": -2}',
    '{"prompt_len": [3', '4], "output_len": 2}', '{"prompt_len": 3, "output_len": 2}\r',
    '\ufeff{"prompt_len": 3, "output_len": 2}', '{"prompt_len": 3, "output_len": 2, "turn": 1}',
    '{"prompt_len": 100000000000000000000, "output_len": 2}',  # past int64
    '{"prompt_len": 9223372036854775807, "output_len": 1}'])  # p + o wraps in int64


def read_both(text: str, context_len: int | None = None) -> tuple[object, object]:
    """``load_requests`` of ``text`` (as bytes, line ends kept) with the whole-text reader and
    with it switched off: each a RequestFile or the ConfigError's message."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(text.encode())
        for fast in (True, False):
            saved = request_files._jsonl_plain_columns
            if not fast:
                request_files._jsonl_plain_columns = lambda _text: None
            try:
                out.append(load_requests(str(path), context_len=context_len))
            except ConfigError as exc:
                out.append(str(exc))
            finally:
                request_files._jsonl_plain_columns = saved
    return out[0], out[1]


def assert_same(a: object, b: object) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, str):
        assert a == b
        return
    for col in COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert (x is None) == (y is None), col
        assert x is None or (np.array_equal(x, y) and x.dtype == y.dtype), col


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(plain.map(json.dumps), odd), min_size=1, max_size=12),
       st.sampled_from(["\n", "\r\n"]), st.booleans(), st.sampled_from([None, 40]))
def test_whole_text_reader_equals_line_by_line(lines: list[str], end: str, last_end: bool,
                                               context_len: int | None) -> None:
    text = end.join(lines) + (end if last_end else "")
    if not text.strip():
        return  # an empty file is refused before either reader runs
    assert_same(*read_both(text, context_len))


@pytest.mark.parametrize("text", [
    '{"prompt_len": 5, "output_len": 2}\n\n  \n{"prompt_len": 6, "output_len": 3}\n',
    '{"prompt_len": 5, "output_len": 2}\r\n{"prompt_len": 6, "output_len": 3, "ignore_eos": true}',
    '{"prompt_len": 5, "output_len": 2, "arrival_s": 0}\n'
    '{"prompt_len": 6, "output_len": 3, "arrival_s": 1.5}\n'])
def test_whole_text_reader_takes_plain_files(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """These files are read by the whole-text reader (not handed on), with their line numbers."""
    monkeypatch.setattr(request_files, "_jsonl_rows", None)  # the line by line reader is not used
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(text.encode())
        t = load_requests(str(path))
    assert t.prompt_len.tolist() == [5, 6] and t.output_len.tolist() == [2, 3]
    assert t.line.tolist() == ([1, 4] if "\n\n" in text else [1, 2])


@pytest.mark.parametrize(("text", "message"), [
    ('{"prompt_len": 5, "output_len": 2}\n{"prompt_len": 5, "output_len": 2}, {"prompt_len": 1}\n',
     "line 2="),
    ('{"prompt_len": 5, "output_len": 2}\n\n{"prompt_len": 5, "output_len": 0}\n',
     "line 3: output_len=0 is invalid; valid: an integer >= 1"),
    ('{"prompt_len": 5, "output_len": 2, "arrival_s": 1}\n{"prompt_len": 5, "output_len": 2}\n',
     "line 2: arrival_s=None is invalid; valid: given on every request or on none")])
def test_bad_rows_are_named_as_line_by_line(text: str, message: str) -> None:
    fast, slow = read_both(text)
    assert isinstance(fast, str) and fast == slow and message in fast


BIG = "100000000000000000000"  # 1e20, past int64's 9223372036854775807


@pytest.mark.parametrize(("row", "context_len", "message"), [
    (f'{{"prompt_len": {BIG}, "output_len": 5}}', None,
     f"line 2: prompt_len={BIG} is invalid; valid: an integer from 1 to 9223372036854775807 (2**63 - 1)"),
    (f'{{"prompt_len": 5, "output_len": {BIG}}}', 8192,
     f"line 2: output_len={BIG} is invalid; valid: an integer from 1 to 9223372036854775807 (2**63 - 1)"),
    (f'{{"prompt_len": 5, "output_len": 2, "max_new_tokens": {BIG}}}', None,
     f"line 2: max_new_tokens={BIG} is invalid; valid: an integer from output_len (2) to "
     "9223372036854775807 (2**63 - 1)"),
    ('{"prompt_len": 9223372036854775807, "output_len": 1}', 100,  # p + o wraps to -2**63 in int64
     "line 2: prompt_len + output_len=9223372036854775808 is invalid; valid: <= the model's "
     "context length, 100 tokens"),
    ('{"prompt_len": 5, "output_len": 2, "arrival_s": 1' + "0" * 400 + "}", None,
     "line 2: arrival_s=1" + "0" * 400 + " is invalid; valid: finite seconds >= 0"),
    ('{"prompt_len": 1' + "0" * 5000 + ', "output_len": 2}', None,
     "line 2='{\"prompt_len\": 1" + "0" * 44 + "...' is invalid; valid: one JSON object per line, "
     "with integers of at most 4300 digits"),
    ('{"prompt_token_ids": [1, 9223372036854775808], "output_len": 2}', None,
     "line 2: prompt_token_ids=[1, 9223372036854775808] is invalid; valid: a non-empty list of "
     "token ids (integers from 0 to 2**63 - 1)"),
])
def test_values_past_int64_are_named_by_both_readers(row: str, context_len: int | None,
                                                      message: str) -> None:
    """A number too large for the int64 (or float64) columns is the same named error from
    both readers, not an OverflowError, nor (p + o wrapping) a request let through."""
    first = '{"prompt_len": 3, "output_len": 2%s}\n' % (', "arrival_s": 0' if "arrival_s" in row else "")
    fast, slow = read_both(first + row + "\n", context_len)
    assert isinstance(fast, str) and fast == slow
    assert fast.endswith(message), fast
