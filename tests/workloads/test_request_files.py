"""Reading traces: the three formats, conversations and their token ids, arrival rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.workloads.request_files import detect_format, load_requests
from pagedkv.workloads.request_rows import made_up_ids
from pagedkv.workloads.sharegpt import load_tokenizer

EXAMPLES = Path(__file__).parents[2] / "pagedkv" / "workloads" / "examples"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def jsonl(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.mark.parametrize(("name", "n", "fmt"), [("chat.jsonl", 43, "jsonl"), ("requests.csv", 40, "csv"),
                                                ("sharegpt.json", 13, "sharegpt")])
def test_shipped_examples_load(name: str, n: int, fmt: str) -> None:
    path = str(EXAMPLES / name)
    assert detect_format(path, (EXAMPLES / name).read_text()[:10]) == fmt
    t = load_requests(path, context_len=8192)
    assert len(t) == n and (t.prompt_len >= 1).all() and (t.output_len >= 1).all()
    assert (t.max_new_tokens >= t.output_len).all()


def test_csv_and_jsonl_give_the_same_requests(tmp_path: Path) -> None:
    rows = [{"prompt_len": 12, "output_len": 3, "arrival_s": 0.0},
            {"prompt_token_ids": [5, 6, 7], "output_len": 2, "max_new_tokens": 9, "arrival_s": 0.5,
             "ignore_eos": True}]
    a = load_requests(write(tmp_path, "t.jsonl", jsonl(rows)))
    b = load_requests(write(tmp_path, "t.csv", "prompt_len,prompt_token_ids,output_len,max_new_tokens,"
                                            "arrival_s,ignore_eos\n12,,3,,0,\n,5 6 7,2,9,0.5,true\n"))
    for col in ("prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert a.max_new_tokens.tolist() == [3, 9]  # default: output_len, as bench_serving sends
    assert a.line.tolist() == [1, 2] and b.line.tolist() == [2, 3]
    assert np.array_equal(a.prompt_ids[1], b.prompt_ids[1])


def test_conversation_turns_resend_the_history_as_made_up_ids(tmp_path: Path) -> None:
    rows = [{"conversation_id": "a", "prompt_len": 10, "output_len": 4},
            {"prompt_len": 7, "output_len": 2},
            {"conversation_id": "a", "prompt_len": 20, "output_len": 3}]
    t = load_requests(write(tmp_path, "c.jsonl", jsonl(rows)))
    assert t.follows.tolist() == [-1, -1, 0] and t.turn.tolist() == [1, 0, 2]
    first, single, second = t.specs(np.zeros(3))
    assert single.input_ids is None and single.follows is None
    assert second.follows == 0 and len(second.input_ids) == 20
    history = np.concatenate((first.input_ids, first.output_ids))
    assert np.array_equal(second.input_ids[:14], history)  # prompt + answer of turn 1
    assert np.array_equal(second.input_ids[14:], made_up_ids(2, 14, 20))
    assert len(set(second.input_ids[14:].tolist()) & set(history.tolist())) == 0


def test_later_turn_shorter_than_the_history_is_refused(tmp_path: Path) -> None:
    rows = [{"conversation_id": 1, "prompt_len": 10, "output_len": 4},
            {"conversation_id": 1, "prompt_len": 12, "output_len": 3}]
    with pytest.raises(ConfigError, match=r"line 2: prompt_len=12 is invalid; valid: >= 14"):
        load_requests(write(tmp_path, "c.jsonl", jsonl(rows)))


def test_turn_numbers_follow_one_another(tmp_path: Path) -> None:
    rows = [{"conversation_id": "x", "turn": 1, "prompt_len": 10, "output_len": 4},
            {"conversation_id": "y", "prompt_len": 10, "output_len": 4},
            {"conversation_id": "x", "turn": 2, "prompt_len": 20, "output_len": 3},
            {"conversation_id": "y", "turn": 2, "prompt_len": 20, "output_len": 3}]
    t = load_requests(write(tmp_path, "c.jsonl", jsonl(rows)))
    assert t.turn.tolist() == [1, 1, 2, 2] and t.follows.tolist() == [-1, -1, 0, 1]


@pytest.mark.parametrize(("rows", "message"), [
    ([{"prompt_len": 0, "output_len": 1}], "line 1: prompt_len=0"),
    ([{"prompt_len": 3, "output_len": 1.5}], "line 1: output_len=1.5"),
    ([{"prompt_len": 3, "output_len": 2, "max_new_tokens": 1}],
     "max_new_tokens=1 is invalid; valid: an integer >= output_len (2)"),
    ([{"prompt_len": 3, "prompt_token_ids": [1, 2], "output_len": 2}],
     "prompt_len=3 is invalid; valid: len(prompt_token_ids)=2"),
    ([{"prompt_token_ids": [1, -2], "output_len": 2}], "prompt_token_ids=[1, -2]"),
    ([{"prompt_len": 3, "output_len": 2, "arrival_s": 0}, {"prompt_len": 3, "output_len": 2}],
     "line 2: arrival_s=None is invalid; valid: given on every request or on none"),
    ([{"prompt_len": 3, "output_len": 2, "arrival_s": -1}],
     "arrival_s=-1 is invalid; valid: finite seconds >= 0"),
    ([{"prompt_len": 3, "output_len": 2, "ignore_eos": "yes"}], "ignore_eos='yes'"),
    ([{"prompt_len": 3, "output_len": 2, "turn": 1}],
     "turn=1 is invalid; valid: only with a conversation_id"),
])
def test_bad_rows_name_line_field_value_and_range(tmp_path: Path, rows: list[dict[str, object]],
                                                  message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_requests(write(tmp_path, "bad.jsonl", jsonl(rows)))
    assert message in str(err.value)


def test_csv_length_past_int64_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_requests(write(tmp_path, "t.csv", "prompt_len,output_len\n3,2\n100000000000000000000,5\n"))
    assert str(err.value).endswith("t.csv line 3: prompt_len=100000000000000000000 is invalid; "
                                   "valid: an integer from 1 to 9223372036854775807 (2**63 - 1)")


def test_non_finite_arrival_in_csv(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 2: arrival_s=nan is invalid"):
        load_requests(write(tmp_path, "t.csv", "prompt_len,output_len,arrival_s\n3,2,nan\n"))


def test_sharegpt_turns_and_estimate(tmp_path: Path) -> None:
    conv = [{"id": "c", "conversations": [
        {"from": "system", "value": "s" * 8}, {"from": "human", "value": "q" * 10},
        {"from": "gpt", "value": "a" * 17}, {"from": "human", "value": "r" * 4},
        {"from": "gpt", "value": ""}, {"from": "human", "value": "t" * 3},
        {"from": "gpt", "value": "b" * 4}]}]
    path = write(tmp_path, "s.json", json.dumps(conv))
    t = load_requests(path, chars_per_token=4.0)
    # turn 1: ceil(8/4) + ceil(10/4) = 5 prompt, ceil(17/4) = 5 out; turn 2 skipped (empty
    # answer); turn 3: 5 + 5 + 1 + 1 = 12 prompt, 1 out, and it follows turn 1
    assert t.prompt_len.tolist() == [5, 12] and t.output_len.tolist() == [5, 1]
    assert t.follows.tolist() == [-1, 0] and t.line.tolist() == [1, 1] and t.turn.tolist() == [1, 2]
    assert any("4 characters per token" in n for n in t.notes)
    assert any("skipped 1 turn" in n for n in t.notes)
    first = load_requests(path, turns="first")
    assert len(first) == 1 and first.follows.tolist() == [-1]


@pytest.mark.parametrize(("text", "what"), [
    ('[{"id": ' + "9" * 5000 + "}]", "s.json line 1='an integer of over 4300 digits'"),
    ("[" * 100_000 + "]" * 100_000, "s.json='JSON nested too deep'")])
def test_sharegpt_json_python_cannot_parse_is_a_named_error(tmp_path: Path, text: str, what: str) -> None:
    # json.load raises a plain ValueError for an integer of over 4300 digits and RecursionError
    # for deep nesting: both were tracebacks
    with pytest.raises(ConfigError, match=rf"{re.escape(what)} is invalid; valid: ShareGPT JSON"):
        load_requests(write(tmp_path, "s.json", text), turns="first")


def test_sharegpt_with_a_local_tokenizer(tmp_path: Path) -> None:
    """A word-level tokenizer built here (no download): real ids, and a later turn's prompt
    starts with the earlier turn's prompt and answer ids."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {w: i for i, w in enumerate(["[UNK]", "hello", "there", "how", "are", "you", "fine"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    folder = tmp_path / "tok"
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    conv = [{"conversations": [{"from": "human", "value": "hello there"},
                               {"from": "gpt", "value": "how are you"},
                               {"from": "human", "value": "fine"}, {"from": "gpt", "value": "fine fine"}]}]
    t = load_requests(write(tmp_path, "s.json", json.dumps(conv)), tokenizer=str(folder))
    assert t.prompt_len.tolist() == [2, 6] and t.output_len.tolist() == [3, 2]
    assert t.prompt_ids[1].tolist() == [1, 2, 3, 4, 5, 6] and t.output_ids[0].tolist() == [3, 4, 5]
    assert any("tokenizer in" in n for n in t.notes)


def test_tokenizer_folder_without_files_is_a_named_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--tokenizer=.* is invalid; valid: a folder holding one of"):
        load_tokenizer(str(tmp_path))


@pytest.mark.parametrize("name", ["requests.csv", "plain.jsonl"])
def test_columnar_fast_path_equals_the_row_by_row_path(tmp_path: Path, name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import pagedkv.workloads.request_files as request_files

    path = str(EXAMPLES / name) if name.endswith(".csv") else write(tmp_path, name, jsonl(
        [{"prompt_len": 5 + i, "output_len": 1 + i % 3, "arrival_s": i / 4} for i in range(9)]
        + [{"prompt_len": 7, "output_len": 2, "max_new_tokens": 30, "arrival_s": 3}]))
    fast = load_requests(path, context_len=8192)
    calls: list[int] = []
    monkeypatch.setattr(request_files, "plain_requests", lambda *a: calls.append(1))
    slow = load_requests(path, context_len=8192)
    assert calls  # the fast path was offered the file and declined
    for col in ("line", "prompt_len", "output_len", "max_new_tokens", "arrival_s", "ignore_eos",
                "follows", "conversation", "turn"):
        assert np.array_equal(getattr(fast, col), getattr(slow, col)), col
