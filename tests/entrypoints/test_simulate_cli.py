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
    (("--num-requests", "0"), "--num-requests=0"),
    (("--rate", "-1"), "rate=-1.0"),
    (("--policy", "lifo"), "policy='lifo'"),
    (("--mem-fraction-static", "1.5"), "mem_fraction_static=1.5"),
    (("--gpu", "tpu"), "gpu='tpu'"),
    (("--max-running-requests", "0"), "--max-running-requests=0 is invalid; valid: an integer >= 1"),
    (("--max-running-requests", "-3"), "--max-running-requests=-3"),
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


def test_simulate_runs_a_sliding_window_hybrid_on_both_pools(
        capsys: pytest.CaptureFixture[str]) -> None:
    # gpt-oss runs on its full and SWA pools (SGLang 0.5.23's hybrid scheduler); the summary
    # gives both pools' peak; under --disable-hybrid-swa-memory it runs on one full-length pool
    base = ("--model", str(GPT_OSS), "--num-requests", "5", "--weights-gib", "12.8")
    assert run_simulate(parse(*base, "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["completed"] == 5 and out["swa_peak_in_use"] > 0
    assert run_simulate(parse(*base)) == 0
    text = capsys.readouterr().out
    assert "full KV pool: peak" in text and "SWA pool: peak" in text and "window 127" in text
    assert "full pool " in text.splitlines()[0] and "tokens and SWA pool " in text.splitlines()[0]
    assert run_simulate(parse(*base, "--disable-hybrid-swa-memory", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["completed"] == 5 and "swa_peak_in_use" not in out


def test_simulate_hybrid_scheduler_follows_0_5_23() -> None:
    with pytest.raises(ConfigError, match=r"0\.5\.23 for a sliding-window hybrid"):
        run_simulate(parse("--model", str(GPT_OSS), "--num-requests", "5", "--weights-gib",
                           "12.8", "--sglang-version", "0.5.9"))


@pytest.mark.parametrize(("options", "reads"), [
    ({"model": "llama-3-8b"}, "a decode step reads the weights and the batch's KV at 3.35 TB/s, a prefill "
                              "does 2 FLOPs per parameter per token"),
    ({"model": "gpt-oss-20b", "weights_bytes": 13 << 30},
     "a decode step reads the dense weights, the experts the batch's tokens are routed to (uniform routing "
     "assumed) and the batch's KV (window layers: at most 127 tokens per request) at 3.35 "
     "TB/s, a prefill does 2 FLOPs per active parameter per token"),
    ({"model": "qwen3-next-80b-a3b", "tp": 4, "radix_cache": False},
     "routed to (uniform routing assumed) and the batch's KV, and each request's state slot "
     "(read and written), at 3.35 TB/s"),
])
def test_the_report_says_what_a_step_reads(options: dict, reads: str) -> None:
    from pagedkv.entrypoints.cli_simulate_output import step_time_text
    from pagedkv.entrypoints.simulation import simulated_engine

    engine = simulated_engine(gpu="h100-sxm-80gb", **options)
    assert reads in step_time_text(engine)


@pytest.mark.parametrize(("asked", "runs"), [(3, 3), (10_000_000, 2500)])
def test_max_running_requests_caps_the_running_batch_as_sglang_sizes_it(asked: int, runs: int) -> None:
    """``--max-running-requests`` is SGLang's: the running batch never exceeds it, and
    0.5.23 caps it at half the pool (5,000 tokens: 2,500)."""
    from pagedkv.entrypoints.cli_simulate_run import engine_options
    from pagedkv.entrypoints.simulation import simulated_engine
    from pagedkv.workloads.synthetic import uniform

    args = parse("--max-total-tokens", "5000", "--max-running-requests", str(asked))
    engine = simulated_engine(**engine_options(args))
    assert engine.config.max_running_requests == runs
    trace = engine.run(uniform(12, (20, 40), (20, 40), 40, rate=None, seed=1)).trace
    assert max(trace.steps["num_running"]) == min(runs, 12)
    plain = simulated_engine(**engine_options(parse("--max-total-tokens", "5000")))
    assert plain.config.max_running_requests == plain.plan.max_running_requests
