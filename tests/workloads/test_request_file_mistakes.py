"""A fresh user's requests files: a byte-order mark, mistyped or extra column names, turns
out of order, a cap below the answer, ShareGPT shapes that are not a list of records. Each
is read right or refused with the file's line and the project's one-line message."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.entrypoints.cli import main
from pagedkv.errors import ConfigError
from pagedkv.managers import FixedStepTime, Scheduler
from pagedkv.workloads.request_fields import FIELDS
from pagedkv.workloads.request_files import load_requests

BOM = b"\xef\xbb\xbf"
VALID = ", ".join(FIELDS)
COLUMNS = ("line", "prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos",
           "follows", "conversation", "turn")


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def jsonl(*rows: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def error(path: str, **options: object) -> str:
    with pytest.raises(ConfigError) as err:
        load_requests(path, **options)
    return str(err.value)


# ----- 1. a byte-order mark -------------------------------------------------------------------
def test_excel_csv_with_a_bom_keeps_its_first_column(tmp_path: Path) -> None:
    t = load_requests(write(tmp_path, "bom.csv", BOM + b"arrival_s,prompt_len,output_len\n0.1,10,10\n"))
    assert t.arrival_s is not None and t.arrival_s.tolist() == [0.1]
    assert t.prompt_len.tolist() == [10] and t.notes == []


def test_sharegpt_with_a_bom_is_read_as_sharegpt(tmp_path: Path) -> None:
    conv = [{"id": "a", "conversations": [{"from": "human", "value": "q" * 8},
                                          {"from": "gpt", "value": "a" * 12}]}]
    t = load_requests(write(tmp_path, "s.json", BOM + json.dumps(conv).encode()))
    assert t.prompt_len.tolist() == [2] and t.output_len.tolist() == [3]


row = st.fixed_dictionaries({"prompt_len": st.integers(1, 40), "output_len": st.integers(1, 9)},
                            optional={"max_new_tokens": st.integers(9, 30), "id": st.integers(0, 5)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=6), st.sampled_from(["t.jsonl", "t.csv", "t.json", "s.json"]),
       st.booleans(), st.sampled_from(["\n", "\r\n"]))
def test_any_file_with_a_bom_reads_as_the_plain_one(rows: list[dict[str, object]], name: str,
                                                    times: bool, end: str) -> None:
    """The same requests, columns and notes with and without the mark, in every format."""
    if times:
        rows = [{**r, "arrival_s": i / 2} for i, r in enumerate(rows)]
    if name == "s.json":  # ShareGPT: one record a row, prompt and answer of those lengths
        text = json.dumps([{"id": i, "conversations": [
            {"from": "human", "value": "p" * (4 * r["prompt_len"])},
            {"from": "gpt", "value": "o" * (4 * r["output_len"])}]} for i, r in enumerate(rows)])
    elif name == "t.csv":
        keys = sorted({k for r in rows for k in r})
        text = end.join([",".join(keys)] + [",".join(str(r.get(k, "")) for k in keys) for r in rows]) + end
    else:
        text = end.join(json.dumps(r) for r in rows) + end
    with tempfile.TemporaryDirectory() as tmp:
        plain = load_requests(write(Path(tmp), name, text))
        marked = load_requests(write(Path(tmp), "bom-" + name, BOM + text.encode()))
    for col in COLUMNS:
        a, b = getattr(plain, col), getattr(marked, col)
        assert (a is None and b is None) or np.array_equal(a, b), col
    assert plain.notes == marked.notes


# ----- 2. names that are not fields -------------------------------------------------------------
@pytest.mark.parametrize(("name", "text", "message"), [
    ("t.jsonl", jsonl({"prompt_len": 3, "output_len": 2},
                      {"arival_s": 0.1, "prompt_len": 3, "output_len": 2}),
     f"t.jsonl line 2: key='arival_s' is invalid; valid: one of {VALID} (did you mean arrival_s?)"),
    ("t.csv", "prompt_len,output_len,max_tokens\n3,2,8\n",
     f"t.csv line 1 (CSV header): column='max_tokens' is invalid; valid: one of {VALID} (did you "
     "mean max_new_tokens? max_tokens is OpenAI's name for it)"),
    ("t.csv", "Prompt_Len,output_len\n3,2\n",
     f"t.csv line 1 (CSV header): column='Prompt_Len' is invalid; valid: one of {VALID} (did you "
     "mean prompt_len?)"),
    ("t.jsonl", jsonl({"prompt_len": 3, "output_len": 2, "timestamp": 5}),
     f"t.jsonl line 1: key='timestamp' is invalid; valid: one of {VALID} (did you mean arrival_s?)"),
    ("t.jsonl", jsonl({"conversation_id": "c", "turns": 1, "prompt_len": 3, "output_len": 2}),
     f"t.jsonl line 1: key='turns' is invalid; valid: one of {VALID} (did you mean turn?)"),
    ("t.jsonl", jsonl({"id": "a", "conversations": [{"from": "human", "value": "hi"}]}),
     "t.jsonl line 1: key='conversations' is invalid; valid: a request row; this is a ShareGPT "
     "record, and a ShareGPT file is one JSON list of records ([{...}, {...}]), read with "
     "--requests-format sharegpt"),
    ("t.csv", "prompt_len,output_len,prompt_len\n3,2,4\n",
     "t.csv line 1 (CSV header): column='prompt_len' is invalid; valid: each column once (it is "
     "there twice)"),
    ("t.csv", "prompt_len,id\n3,2\n",
     "t.csv line 1 (CSV header)='prompt_len,id' is invalid; valid: column names including "
     "prompt_len or prompt_token_ids, and output_len or output_token_ids"),
])
def test_a_mistyped_name_is_refused_with_its_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    assert error(write(tmp_path, name, text)).endswith(message)


@pytest.mark.parametrize(("name", "text"), [
    ("plain.csv", "id,prompt_len,output_len,text\n7,10,4,hello\n8,12,5,there\n"),  # columnar path
    ("conv.csv", "id,conversation_id,prompt_len,output_len,text\n7,c,10,4,hi\n8,c,20,5,there\n"),
    ("t.jsonl", jsonl({"id": 7, "prompt_len": 10, "output_len": 4, "text": "hi"},
                      {"id": 8, "prompt_len": 12, "output_len": 5, "model": "m"})),
])
def test_extra_columns_are_left_out_and_named_in_the_notes(tmp_path: Path, name: str, text: str) -> None:
    t = load_requests(write(tmp_path, name, text))
    assert t.prompt_len.tolist()[0] == 10 and t.output_len.tolist() == [4, 5]
    ignored = "id, text" if "model" not in text else "id, text, model"
    assert t.notes == [f"ignored columns: {ignored} (not fields pagedkv reads)"]


def test_sharegpt_records_keep_their_extra_keys(tmp_path: Path) -> None:
    conv = [{"id": "a", "model": "gpt-4", "lang": "en", "conversations": [
        {"from": "human", "value": "q" * 8, "weight": 0}, {"from": "gpt", "value": "a" * 4, "weight": 1}]}]
    t = load_requests(write(tmp_path, "s.json", json.dumps(conv)))
    assert len(t) == 1 and not any("ignored" in n for n in t.notes)


# ----- 3. turns ------------------------------------------------------------------------------------
TURN_RULE = "a conversation's turns are 1, 2, 3, ... in file order)"
FIRST = f"valid: 1, the first turn of conversation 'x' ({TURN_RULE}"


@pytest.mark.parametrize(("turns", "message"), [
    ([2], f"c.jsonl line 1: turn=2 is invalid; {FIRST}"),
    ([1, 3], "c.jsonl line 2: turn=3 is invalid; valid: 2, the next turn of conversation 'x' (turn 1 "
             f"is on line 1; {TURN_RULE}"),
    ([1, 2, 2], "c.jsonl line 3: turn=2 is invalid; valid: 3, the next turn of conversation 'x' (turn 2 "
                f"is on line 2; {TURN_RULE}"),
    ([2, 1], f"c.jsonl line 1: turn=2 is invalid; {FIRST}"),
    (["1"], f"c.jsonl line 1: turn='1' is invalid; {FIRST}"),
    ([1.0], f"c.jsonl line 1: turn=1.0 is invalid; {FIRST}"),
])
def test_turns_are_1_2_3_in_file_order(tmp_path: Path, turns: list[object], message: str) -> None:
    rows = [{"conversation_id": "x", "turn": n, "prompt_len": 10 * 2**i, "output_len": 4}
            for i, n in enumerate(turns)]
    assert error(write(tmp_path, "c.jsonl", jsonl(*rows))).endswith(message)


# ----- 4. max_new_tokens below output_len ------------------------------------------------------------
@pytest.mark.parametrize("name", ["t.jsonl", "t.csv"])
def test_a_cap_below_output_len_names_the_bound(tmp_path: Path, name: str) -> None:
    text = (jsonl({"prompt_len": 5, "output_len": 10, "max_new_tokens": 7}) if name == "t.jsonl"
            else "prompt_len,output_len,max_new_tokens\n5,10,7\n")
    line = 1 if name == "t.jsonl" else 2
    assert error(write(tmp_path, name, text)).endswith(
        f"{name} line {line}: max_new_tokens=7 is invalid; valid: an integer >= output_len (10)")


# ----- 5. a later turn with its own arrival_s -----------------------------------------------------------
@pytest.mark.parametrize(("second", "sent"), [(5.0, 5.0), (0.001, 0.04)])
def test_a_later_turn_is_sent_at_its_time_or_the_answer_whichever_is_later(
        tmp_path: Path, second: float, sent: float) -> None:
    """Turn 1 (arriving at 0) answers 4 tokens in 4 steps of 10 ms (a prefill, three decodes):
    at 0.04 s. Turn 2 is sent at its own time if that is later, else when the answer is in."""
    t = load_requests(write(tmp_path, "c.jsonl", jsonl(
        {"conversation_id": "c", "prompt_len": 8, "output_len": 4, "arrival_s": 0.0},
        {"conversation_id": "c", "prompt_len": 16, "output_len": 2, "arrival_s": second})))
    assert t.arrival_s is not None
    s = Scheduler(list(t.specs(t.arrival_s)), max_total_num_tokens=256, step_time=FixedStepTime(0.01))
    s.run()
    assert s.reqs[1].arrival_s == pytest.approx(sent)


# ----- 6. ShareGPT shapes ----------------------------------------------------------------------------
HI = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]


@pytest.mark.parametrize(("text", "message"), [
    (json.dumps({"id": "a", "conversations": HI}),
     "s.json line 1: top level='an object with keys id, conversations' is invalid; valid: a ShareGPT "
     'file is a JSON list of records ([{"conversations": [...]}, ...]), got an object'),
    ('\n  {"id": "a",\n "conversations": []}',
     "s.json line 2: top level='an object with keys id, conversations' is invalid; valid: a ShareGPT "
     'file is a JSON list of records ([{"conversations": [...]}, ...]), got an object'),
    (json.dumps([{"id": "a", "conversations": HI[:1]}, {"id": "b", "conversations": HI[1:]},
                 {"id": "c", "conversations": [HI[0], {"from": "gpt", "value": ""}]}]),
     "valid: a file with at least one request; its 3 ShareGPT record(s) gave none: 2 with no human "
     "turn followed by a gpt turn, 1 whose answered turns all have an empty prompt or answer"),
    ("[]", "valid: a file with at least one request; its 0 ShareGPT record(s) gave none"),
    (json.dumps({"id": "a", "conversations": HI}) + "\n" + json.dumps({"id": "b", "conversations": HI}),
     's.json line 2=\'{"id": "b", "conversations": [{"from": "human", "value": "hi\' is invalid; '
     "valid: ShareGPT JSON: one list of records, [{...}, {...}] (the file goes on after its first "
     "JSON value: JSON Lines of records? put them in one list)"),
    (json.dumps([{"id": "a", "conversations": HI}, {"id": "b", "convs": HI}]),
     "s.json record 2: conversations='an object with keys id, convs' is invalid; valid: a list of "
     'messages ({"from": ..., "value": ...}) under the key "conversations"'),
    ('[{"id": "a",\n "conversations": [}]',
     "s.json line 2=' \"conversations\": [}]' is invalid; valid: ShareGPT JSON (Expecting value, column 20)"),
])
def test_sharegpt_shapes_are_named(tmp_path: Path, text: str, message: str) -> None:
    assert error(write(tmp_path, "s.json", text)).endswith(message)


# ----- 7. every error names its line, in one line through the CLI ----------------------------------------
@pytest.mark.parametrize(("name", "text", "message"), [
    ("latin.csv", b"prompt_len,output_len\n3,2\n\xe9,3\n",
     "latin.csv line 3=b'\\xe9' is invalid; valid: UTF-8 text (invalid continuation byte at byte 26; "
     "save the file as UTF-8)"),
    ("big.json", b'[{"id": 1},\n {"id": ' + b"9" * 5000 + b"}]",
     "big.json line 2='an integer of over 4300 digits' is invalid; valid: ShareGPT JSON with "
     "integers of at most 4300 digits (Python parses no longer ones)"),
    ("typo.jsonl", jsonl({"arival_s": 0.1, "prompt_len": 10, "output_len": 10}).encode(),
     f"typo.jsonl line 1: key='arival_s' is invalid; valid: one of {VALID} (did you mean arrival_s?)"),
    ("head.csv", b"prompt_len,output_len\n",
     "--requests-file='head.csv' is invalid; valid: a file with at least one request (the CSV has a "
     "header, line 1, and no rows)"),
])
def test_the_cli_prints_one_line_naming_the_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, name: str,
                                                 text: bytes, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, name, text)
    assert main(["simulate", "--quiet", "--requests-file", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err == f"pagedkv simulate: error: {message}\n"
