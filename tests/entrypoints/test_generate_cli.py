"""``pagedkv generate``: a real run from the command line, and its errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
from pagedkv.entrypoints.cli import main


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


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "/no/such/folder"], "model='/no/such/folder' is invalid; valid: a folder "
     "holding a Hugging Face config.json, or a hub id such as Qwen/Qwen2.5-0.5B-Instruct, "
     "'tiny' or 'random:<arch>[:<size>]' (random weights) (no such folder: /no/such/folder)"),
    (["--mem-fraction-static", "0"], "mem_fraction_static=0.0 is invalid; valid: a fraction in (0, 1]"),
    (["--mem-fraction-static", "1.5"], "mem_fraction_static=1.5 is invalid"),
    (["--mem-fraction-static", "nan"], "mem_fraction_static=nan is invalid"),
    (["--mem-fraction-static", "inf"], "mem_fraction_static=inf is invalid"),
    (["--max-total-tokens", "10", "--page-size", "16"],
     "max_total_tokens=10 is invalid; valid: at least page_size=16: the pool holds whole pages, "
     "and 10 tokens round down to 0 pages of 16"),
    (["--max-total-tokens", "0"], "max_total_tokens=0 is invalid; valid: an integer >= 1"),
    (["--page-size", "0"], "page_size=0 is invalid"),
    (["--seed", "-1"], "--seed=-1 is invalid; valid: an integer >= 0"),
    (["--chunked-prefill-size", "0"], "--chunked-prefill-size=0 is invalid; valid: an integer >= 1"),
    (["--max-running-requests", "0"], "--max-running-requests=0 is invalid"),
    (["--schedule-conservativeness", "nan"], "--schedule-conservativeness=nan is invalid; "
     "valid: a finite number > 0"),
    (["--schedule-conservativeness", "0"], "--schedule-conservativeness=0.0 is invalid"),
    (["--chunked-prefill-size", "4", "--page-size", "8"],
     "chunked_prefill_size=4 is invalid; valid: None or an integer >= page_size=8"),
    (["--max-total-tokens", "32", "--prompt-ids", ",".join(["1"] * 30)],
     "len(prompts[0])=30 is invalid; valid: < max_req_input_len=26 (min(context_len - 1, "
     "max_total_num_tokens - 1) - 5 with max_total_num_tokens=32); max_total_tokens >= 37 "
     "(the pool is the size given)"),
])
def test_generate_refuses_by_name(argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "mem_fraction_static than" not in err  # that hint helps on a GPU only


def test_an_offline_hub_id_fails_at_once(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv.model_executor import hub

    monkeypatch.setattr(hub, "_PROBES", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["generate", "--device", "cpu", "--model", "org/name"]) == 2
    assert ("model='org/name' is invalid; valid: a folder holding a Hugging Face config.json, or "
            "a hub id such as Qwen/Qwen2.5-0.5B-Instruct, 'tiny' or 'random:<arch>[:<size>]' "
            "(random weights) that is in the local cache: the Hugging Face hub cannot be reached "
            "(HF_HUB_OFFLINE=1 is set)") in capsys.readouterr().err


def test_a_folder_without_tokenizer_serves_ids(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from pagedkv.model_executor.model_loader import load_causal_lm, random_model_config

    model, _ = load_causal_lm(random_model_config(), torch.device("cpu"), torch.float32)
    model.save_pretrained(tmp_path)
    assert main(["generate", "--device", "cpu", "--model", str(tmp_path), "--prompt-ids",
                 "1,2,3", "--max-new-tokens", "2", "--ignore-eos", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["model"] == str(tmp_path) and len(out["outputs"][0]["output_ids"]) == 2
    assert "text" not in out["outputs"][0]
    assert main(["generate", "--device", "cpu", "--model", str(tmp_path), "--prompt", "hi"]) == 2
    assert "prompts[0]='hi' is invalid; valid: token ids (this model has no tokenizer)" in \
        capsys.readouterr().err


def test_mem_fraction_on_the_cpu_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--device", "cpu", "--mem-fraction-static", "0.5", "--prompt-ids",
                 "1,2", "--max-new-tokens", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err == (
        "pagedkv generate: note: mem_fraction_static=0.5 is ignored on cpu: no free memory is "
        "measured there, the pool is max_total_tokens=4096\n")


@pytest.mark.parametrize(("version", "page", "granted", "why"), [
    # pool 48 in pages of 16: 48 - ceil_to_page(5) - 16 - 1 = 15 (0.5.23's pool bound)
    ("0.5.23", "16", 15, "the pool of max_total_num_tokens=48 in pages of 16 holds the 5-token "
     "prompt, one page for admission and one slot for the allocator, and leaves room for 15"),
    # 0.5.9 only bounds by max_req_len = min(512 - 1, 48 - 1) = 47: 47 - 5 - 1 = 41
    ("0.5.9", "16", 41, "max_req_len = min(context_len - 1, max_total_num_tokens - 1) = 47 (set "
     "by max_total_num_tokens) leaves 41 after the 5-token prompt"),
])
def test_a_lowered_cap_is_reported(version: str, page: str, granted: int, why: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--device", "cpu", "--max-total-tokens", "48", "--page-size", page,
                 "--max-new-tokens", "64", "--prompt-ids", "1,2,3,4,5", "--ignore-eos",
                 "--sglang-version", version, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"pagedkv generate: request 0: max_new_tokens=64 lowered to "
                            f"{granted} ({why}; SGLang clamps the same way at arrival)\n")
    out = json.loads(captured.out)
    row = out["outputs"][0]
    assert (row["max_new_tokens"], row["max_new_tokens_granted"]) == (64, granted)
    assert len(row["output_ids"]) == granted and row["finish_reason"] == "length"
    assert out["clamps"] == [{"rid": 0, "asked": 64, "granted": granted, "why": why}]


def test_json_times_and_text_beside_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--device", "cpu", "--prompt-ids", "1,2,3", "--prompt-ids", "4,5",
                 "--max-new-tokens", "4", "--ignore-eos", "--json", "--chunked-prefill-size",
                 "-1", "--max-running-requests", "1", "--schedule-conservativeness", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    first, second = out["outputs"]
    for row in out["outputs"]:
        assert 0 < row["ttft_s"] < row["e2e_s"]
        assert row["tpot_s"] == pytest.approx((row["e2e_s"] - row["ttft_s"]) / 3)
    assert second["ttft_s"] > first["e2e_s"]  # one running request at a time: it waited
    assert out["clamps"] == []


def test_disable_overlap_schedule_runs_the_normal_loop(capsys: pytest.CaptureFixture[str]) -> None:
    """Two prompts, 3 tokens each (ignore EOS), one prefill pass for both. The normal loop
    takes 3 steps (prefill, 2 decodes); the overlap loop 4: the second decode's result, which
    ends both, is processed in a step that launches nothing. The same tokens either way."""
    argv = ["generate", "--device", "cpu", "--prompt-ids", "1,2,3,4,5", "--prompt-ids", "1,2,3,9",
            "--max-new-tokens", "3", "--ignore-eos", "--json"]
    runs = {}
    for disable, flag in ((False, []), (True, ["--disable-overlap-schedule"])):
        assert main([*argv, *flag]) == 0
        runs[disable] = json.loads(capsys.readouterr().out)
        assert runs[disable]["meta"]["disable_overlap_schedule"] is disable
    assert runs[True]["metrics"]["num_steps"] == 3 and runs[False]["metrics"]["num_steps"] == 4
    assert ([r["output_ids"] for r in runs[True]["outputs"]]
            == [r["output_ids"] for r in runs[False]["outputs"]])
    assert main([*argv[:-1], "--disable-overlap-schedule"]) == 0
    assert "scheduler (normal loop, --disable-overlap-schedule)" in capsys.readouterr().out
