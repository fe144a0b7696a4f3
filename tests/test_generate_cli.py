"""``pagedkv generate``: a real run from the command line, and its errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
from pagedkv.cli import main


def test_generate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--device", "cpu", "--prompt-ids", "1,2,3,4,5", "--prompt-ids",
                 "1, 2, 3, 9", "--max-new-tokens", "3", "--page-size", "2", "--ignore-eos",
                 "--json", "--log"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["prompt_len"] for r in out["outputs"]] == [5, 4]
    assert all(len(r["output_ids"]) == 3 for r in out["outputs"])
    assert out["meta"]["model"] == "random llama" and out["meta"]["max_total_num_tokens"] == 4096
    assert out["log"][0].startswith("KV Cache is allocated. #tokens: 4096")


@pytest.mark.parametrize(("argv", "message"), [
    (["--prompt", "hello"], "prompts[0]='hello' is invalid; valid: token ids"),
    (["--prompt-ids", "1,x"], "--prompt-ids='1,x' is invalid; valid: comma-separated integers"),
    (["--model", "random:gpt2"], "arch='gpt2' is invalid; valid: llama, mistral, qwen2, qwen3"),
    (["--dtype", "bf16"], "dtype='bfloat16' is invalid; valid: float32 on the CPU"),
    (["--max-new-tokens", "0"], "--max-new-tokens=0 is invalid"),
])
def test_generate_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--device", "cpu", *argv]) == 2
    assert message in capsys.readouterr().err
