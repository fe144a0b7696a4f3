"""``pagedkv simulate``'s parser and runner (wired into ``pagedkv.entrypoints.cli`` on main)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pagedkv.entrypoints.cli_simulate import add_simulate_parser, run_simulate
from pagedkv.errors import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pagedkv")
    add_simulate_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["simulate", *argv])


def test_json_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--num-requests", "30", "--max-total-tokens", "4000", "--rate", "20",
                 "--page-size", "16", "--json")
    assert run_simulate(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["max_total_num_tokens"] == 4000 and out["meta"]["page_size"] == 16
    assert out["meta"]["arrival_rate"] == 20.0
    assert out["metrics"]["num_requests"] == 30
    assert len(out["requests"]) == out["summary"]["completed"] == 30
    assert "modelled, not measured" in out["times"] and "RooflineStepTime" in out["step_time_model"]


def test_workload_names_match_the_workloads() -> None:
    from pagedkv.entrypoints.cli_simulate import WORKLOAD_NAMES
    from pagedkv.entrypoints.cli_simulate_workload import WORKLOADS

    assert tuple(WORKLOADS) == WORKLOAD_NAMES


def test_log_lines_in_sglang_format(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--num-requests", "40", "--workload", "fixed", "--max-total-tokens", "3000",
                 "--policy", "no_reserve", "--log")
    assert run_simulate(args) == 0
    out = capsys.readouterr().out
    assert "Prefill batch, #new-seq: " in out and "Decode batch, #running-req: " in out
    assert "KV cache pool is full. Retract requests. #retracted_reqs: " in out
    assert "#new_tokens_gained: " in out and "cuda graph: " in out
    assert "retractions: " in out and "requests retracted" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("--workload", "chats"), "workload='chats' is invalid; valid: sharegpt, uniform, fixed"),
    (("--num-requests", "0"), "num_requests=0"),
    (("--rate", "-1"), "rate=-1.0"),
    (("--policy", "lifo"), "policy='lifo'"),
    (("--mem-fraction-static", "1.5"), "mem_fraction_static=1.5"),
    (("--gpu", "tpu"), "gpu='tpu'"),
])
def test_bad_input_names_parameter_value_and_range(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_simulate(parse("--num-requests", "5", *argv) if "--num-requests" not in argv
                     else parse(*argv))


def test_a_cap_above_the_pool_is_warned_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--model", "qwen3-4b", "--gpu", "rtx-4090", "--max-total-tokens", "87552",
                 "--num-requests", "3", "--quiet")
    assert run_simulate(args) == 0
    captured = capsys.readouterr()
    assert "warning: max_total_tokens=87552 is larger than the profiled value 68414" in captured.err
    assert "pool 68,414 tokens" in captured.out


GPT_OSS = Path(__file__).parents[1] / "reference" / "configs" / "gpt-oss-20b.json"


def test_simulate_takes_the_flag_its_sliding_window_refusal_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The refusal of a sliding-window hybrid names --disable-hybrid-swa-memory: simulate must
    # accept that flag (it was only on `pagedkv size`), and then size the one full-length pool.
    with pytest.raises(ConfigError, match="under --disable-hybrid-swa-memory"):
        run_simulate(parse("--model", str(GPT_OSS), "--num-requests", "5", "--weights-gib", "12.8"))
    args = parse("--model", str(GPT_OSS), "--num-requests", "5", "--weights-gib", "12.8",
                 "--disable-hybrid-swa-memory", "--json")
    assert run_simulate(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["completed"] == 5 and out["meta"]["max_total_num_tokens"] > 0
