"""``pagedkv simulate`` on requests files: per-request metrics, sweeps, long-run behaviour and
every bad input of issue 15 (a named error, exit status 2, no traceback)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pagedkv.entrypoints.cli import main
from pagedkv.managers import FixedStepTime, Scheduler, SchedulerConfig
from pagedkv.metrics.request_metrics import COLUMNS, RequestTable
from pagedkv.workloads.synthetic import RequestSpec

EXAMPLES = Path(__file__).parents[2] / "pagedkv" / "workloads" / "examples"
CHAT, CSV, SHAREGPT = (str(EXAMPLES / n) for n in ("chat.jsonl", "requests.csv", "sharegpt.json"))


def simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", "--quiet", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_metrics_follow_bench_serving_definitions(disable_overlap_schedule: bool) -> None:
    """10 ms steps. Step 1 prefills A (first token at 0.01 s); B, sent at 0.005 s, waits
    until step 2 (queue 0.005 s), whose prefill gives its only token at 0.02 s; steps 3-5
    decode A's tokens 2-4 at 0.03, 0.04, 0.05 s: gaps 0.02, 0.01, 0.01, TPOT their mean.
    The same times in the overlap loop: a result is timed when its pass ends (B's token at
    0.02 s, though processed after A's first decode is launched; A's last at 0.05 s, though
    processed in the step after)."""
    specs = [RequestSpec(10, 4, 4, 0.0), RequestSpec(6, 1, 1, 0.005)]
    s = Scheduler(specs, max_total_num_tokens=64, step_time=FixedStepTime(0.01),
                  config=SchedulerConfig(disable_overlap_schedule=disable_overlap_schedule))
    s.run()
    table = RequestTable(2)
    for r in s.reqs:
        table.add(r)
    a, b = (table.row(r) for r in s.reqs)
    assert a["ttft_s"] == pytest.approx(0.01) and a["e2e_s"] == pytest.approx(0.05)
    assert a["tpot_s"] == pytest.approx(0.04 / 3) and a["queue_s"] == 0
    assert b["tpot_s"] is None  # one token: no inter-token time, as bench_serving
    assert b["queue_s"] == pytest.approx(0.005) and b["ttft_s"] == pytest.approx(0.015)
    summary = table.summary()
    assert summary["completed"] == 2 and summary["output_tokens"] == 5
    assert summary["mean_tpot_s"] == pytest.approx(0.04 / 3)  # the one-token request left out
    assert summary["output_throughput"] == pytest.approx(5 / summary["duration_s"])


@pytest.mark.parametrize("path", [CHAT, CSV, SHAREGPT])
def test_each_format_runs_from_the_readme(capsys: pytest.CaptureFixture[str], path: str) -> None:
    code, out, _ = simulate(capsys, "--requests-file", path)
    assert code == 0
    assert "times are modelled, not measured: roofline step-time model" in out
    for label in ("TTFT", "TPOT (mean inter-token)", "end-to-end", "queueing", "throughput:",
                  "retractions:", "prefix reuse:"):
        assert label in out


def test_conversations_reuse_their_history(capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads(simulate(capsys, "--requests-file", CHAT, "--json")[1])
    turns = [r for r in report["requests"] if r["conversation_id"] is not None and r["turn"] > 1]
    assert turns and all(r["cached_tokens"] > 0 for r in turns)
    off = json.loads(simulate(capsys, "--requests-file", CHAT, "--json", "--disable-radix-cache")[1])
    assert off["summary"]["cached_tokens"] == 0 < report["summary"]["cached_tokens"]


def test_csv_table_streams_every_request(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "per_request.csv"
    code, out, _ = simulate(capsys, "--requests-file", CSV, "--max-total-tokens", "6000", "--policy",
                            "no_reserve", "--csv", str(path))
    assert code == 0 and f"per-request table: {path} (40 rows)" in out
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == list(COLUMNS) and sorted(int(r["rid"]) for r in rows) == list(range(40))
    assert sum(int(r["num_retractions"]) for r in rows) > 0  # a small pool retracts
    assert all(float(r["e2e_s"]) >= float(r["ttft_s"]) > 0 for r in rows)


def test_sweep_table_and_offline_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "sweep.html"
    code, out, _ = simulate(capsys, "--requests-file", CSV, "--sweep", "mem_fraction_static=0.8,0.9",
                            "--sweep", "page_size=1,64", "--max-total-tokens", "20000",
                            "--plot", str(plot))
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("mem_fraction_static=")]
    assert len(lines) == 4 and "page_size=64" in lines[1]
    assert "TTFT p50 ms" in out and "pool tokens" in out
    html = plot.read_text()
    assert "<script src=\"https://" not in html and "Plotly.newPlot" in html  # plotly.js inlined
    title = out.splitlines()[0]  # the sweep's title line names the page, and its browser tab
    assert f"<head><title>{title}</title>" in html
    data = json.loads(simulate(capsys, "--requests-file", CSV, "--sweep", "radix_cache=on,off",
                               "--sweep", "policy=sglang,no_reserve", "--json")[1])
    assert [r["setting"] for r in data["sweep"]] == [
        "radix_cache=on policy=sglang", "radix_cache=on policy=no_reserve",
        "radix_cache=off policy=sglang", "radix_cache=off policy=no_reserve"]
    assert [r["meta"]["radix_cache"] for r in data["sweep"]] == [True, True, False, False]


def test_ctrl_c_stops_with_the_partial_summary(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    step, calls = Scheduler.step, []

    def interrupted_step(self: Scheduler) -> bool:
        calls.append(1)
        if len(calls) == 20:  # fast-forward takes many decode steps a call: 20 calls is mid-run
            raise KeyboardInterrupt
        return step(self)

    monkeypatch.setattr(Scheduler, "step", interrupted_step)
    code, out, _ = simulate(capsys, "--requests-file", CHAT)
    assert code == 130
    assert "INTERRUPTED (Ctrl-C): partial summary over the" in out and "of 43 requests" in out
    calls.clear()
    code, out, _ = simulate(capsys, "--requests-file", CHAT, "--json")
    report = json.loads(out)
    assert code == 130 and report["interrupted"] and 0 < report["summary"]["completed"] < 43


def test_progress_bar_only_on_a_terminal(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import pagedkv.entrypoints.long_run as long_run

    monkeypatch.setattr(long_run, "PROGRESS_DELAY_S", 0.0)
    assert main(["simulate", "--requests-file", CHAT]) == 0
    assert "req" not in capsys.readouterr().err  # stderr is not a terminal here
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["simulate", "--requests-file", CHAT]) == 0
    assert "43/43" in capsys.readouterr().err
    assert main(["simulate", "--requests-file", CHAT, "--quiet"]) == 0
    assert "43/43" not in capsys.readouterr().err


def jsonl(tmp_path: Path, name: str, *lines: str) -> str:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


BAD = [
    # (flags, files to write {name: text}, message)
    (["--weights-gib", "nan"], {}, "--weights-gib=nan is invalid; valid: a finite number >= 0 GiB"),
    (["--rate", "inf"], {}, "--rate=inf is invalid; valid: a finite number > 0"),
    (["--rate", "nan"], {}, "--rate=nan is invalid"),
    (["--schedule-conservativeness", "nan"], {}, "--schedule-conservativeness=nan is invalid"),
    (["--mem-fraction-static", "inf"], {}, "mem_fraction_static=inf is invalid; valid: a fraction in (0, 1]"),
    (["--chars-per-token", "inf"], {}, "--chars-per-token=inf is invalid"),
    (["--sweep", "mem_fraction_static=0.8,nan"], {}, "--sweep mem_fraction_static=nan is invalid"),
    (["--seed", "-1"], {}, "--seed=-1 is invalid; valid: an integer >= 0"),
    (["--requests-file", "missing.jsonl"], {}, "valid: an existing file"),
    (["--requests-file", "empty.jsonl"], {"empty.jsonl": ""}, "valid: a file with at least one request"),
    (["--requests-file", "bad.jsonl"],
     {"bad.jsonl": '{"prompt_len": 5, "output_len": 2}\n{"prompt_len": 5,\n'},
     "bad.jsonl line 2="),
    (["--requests-file", "bad.json"], {"bad.json": '[{"conversations": ['}, "valid: ShareGPT JSON"),
    (["--requests-file", "bad.csv"], {"bad.csv": "prompt,output\n5,2\n"}, "bad.csv line 1 (CSV header)"),
    (["--requests-file", "cells.csv"], {"cells.csv": "prompt_len,output_len\n5,2\n5,2,9\n"},
     "cells.csv line 3='9' is invalid; valid: at most 2 cells"),
    (["--requests-file", "neg.jsonl"],
     {"neg.jsonl": '{"prompt_len": 5, "output_len": 2}\n{"prompt_len": 5, "output_len": -2}\n'},
     "neg.jsonl line 2: output_len=-2 is invalid; valid: an integer >= 1"),
    (["--requests-file", "miss.csv"], {"miss.csv": "prompt_len,output_len\n5,2\n,3\n"},
     "miss.csv line 3: prompt_len=None is invalid; valid: an integer >= 1"),
    (["--requests-file", "order.jsonl"],
     {"order.jsonl": '{"prompt_len": 5, "output_len": 2, "arrival_s": 2}\n'
                     '{"prompt_len": 5, "output_len": 2, "arrival_s": 1}\n'},
     "order.jsonl line 2: arrival_s=1 is invalid; valid: >= 2.0, the request before it"),
    (["--requests-file", "big.jsonl"],
     {"big.jsonl": '{"prompt_len": 100000000000000000000, "output_len": 5}\n'},
     "big.jsonl line 1: prompt_len=100000000000000000000 is invalid; valid: an integer from 1 to "
     "9223372036854775807 (2**63 - 1)"),
    (["--requests-file", "big.csv"], {"big.csv": "prompt_len,output_len\n5,100000000000000000000\n"},
     "big.csv line 2: output_len=100000000000000000000 is invalid; valid: an integer from 1 to "
     "9223372036854775807"),
    (["--requests-file", "long.jsonl"], {"long.jsonl": '{"prompt_len": 8000, "output_len": 500}\n'},
     "long.jsonl line 1: prompt_len + output_len=8500 is invalid; valid: <= the model's context "
     "length, 8192"),
    (["--csv", "t.csv", "--sweep", "page_size=1,16"], {},
     "--csv='t.csv' is invalid; valid: only without --sweep"),
    (["--plot", "p.html"], {}, "--plot='p.html' is invalid; valid: only with --sweep"),
    (["--requests-file", "t.jsonl", "--all-at-once", "--rate", "3"],
     {"t.jsonl": '{"prompt_len": 5, "output_len": 2}\n'},
     "--rate=3.0 is invalid; valid: omitted with --all-at-once"),
    (["--sweep", "colour=red"], {}, "valid: NAME=V1,V2,... with NAME one of mem_fraction_static"),
]


@pytest.mark.parametrize(("flags", "files", "message"), BAD)
def test_bad_input_is_a_named_error(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                    files: dict[str, str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, _, err = simulate(capsys, "--num-requests", "5", *flags)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_input_exits_2_without_traceback_in_a_real_process(tmp_path: Path) -> None:
    for argv in (["--weights-gib", "nan"], ["--seed", "-3"],
                 ["--requests-file", jsonl(tmp_path, "n.jsonl", '{"prompt_len": -1, "output_len": 2}')],
                 ["--requests-file", jsonl(tmp_path, "b.jsonl", '{"prompt_len": 100000000000000000000, '
                                                        '"output_len": 5}')]):
        proc = subprocess.run([sys.executable, "-m", "pagedkv", "simulate", *argv],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and "is invalid; valid:" in proc.stderr
        assert "Traceback" not in proc.stderr


def readme_commands() -> list[list[str]]:
    """The README's ``pagedkv simulate --requests-file`` commands, continuation lines joined."""
    import shlex

    text = (Path(__file__).parents[2] / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(line.split(">")[0])[1:] for line in text.splitlines()
            if line.startswith(".venv/bin/pagedkv simulate --requests-file")]


def test_readme_request_file_examples_run(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    commands = readme_commands()
    assert len(commands) >= 4 and any("--sweep" in c for c in commands)
    (tmp_path / "pagedkv").symlink_to(EXAMPLES.parent.parent, target_is_directory=True)
    monkeypatch.chdir(tmp_path)  # the files they write land here
    for argv in commands:
        assert main([*argv, "--quiet"]) == 0, argv
        capsys.readouterr()
    assert (tmp_path / "per_request.csv").exists() and (tmp_path / "sweep.html").exists()


def test_sigint_in_a_real_process_exits_130_without_traceback(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT) of a long run, sent once the run's loop has printed its first
    log line (not after a fixed wait, which a loaded machine can outlast): exit status 130,
    the partial summary, and no traceback."""
    import os
    import select
    import signal
    import time

    from pagedkv.workloads.synthetic import sharegpt_like

    path = tmp_path / "long.jsonl"
    path.write_text("".join(f'{{"prompt_len": {s.prompt_len}, "output_len": {s.output_len}}}\n'
                             for s in sharegpt_like(100_000, seed=1)))
    def as_from_a_terminal() -> None:
        # A child inherits its parent's ignored and blocked signals, and a test runner's worker
        # may ignore or block SIGINT: the run must start with the disposition a shell gives it
        # (Python installs its KeyboardInterrupt handler only over SIG_DFL).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen([sys.executable, "-m", "pagedkv", "simulate", "--requests-file", str(path),
                             "--disable-radix-cache", "--quiet", "--log"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=as_from_a_terminal)
    try:
        seen, deadline = b"", time.monotonic() + 300  # generous: reading the file under load
        while b"Prefill batch" not in seen:  # the first step's log line: the loop is running
            left = deadline - time.monotonic()
            assert left > 0 and select.select([proc.stdout], [], [], left)[0], \
                f"no log line in 300 s; stdout so far: {seen[-500:]!r}"
            chunk = os.read(proc.stdout.fileno(), 65_536)
            assert chunk, f"exit {proc.wait()} before the run began: {proc.stderr.read().decode()}"
            seen += chunk
        proc.send_signal(signal.SIGINT)
        out, err = (b.decode() for b in proc.communicate(timeout=300))
    finally:
        if proc.poll() is None:  # a failed assertion above: do not leave the run behind
            proc.kill()
            proc.wait()
    # what this (test runner's) process passes on, should a run again miss the signal
    parent = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, set()))
    assert proc.returncode == 130, (err, out[-1500:], parent)
    assert "Traceback" not in err
    assert "INTERRUPTED (Ctrl-C): partial summary" in out, (out[-2000:], err)


def test_the_old_trace_flag_names_its_new_name(capsys: pytest.CaptureFixture[str]) -> None:
    """``--trace FILE`` (the flag's name before "trace" meant only the run's record) exits 2 with
    a pointer to ``--requests-file``, not argparse's bare "unrecognized arguments"."""
    code, _, err = simulate(capsys, "--trace", CHAT)
    assert code == 2
    assert "--trace" in err and "--requests-file FILE" in err and "Traceback" not in err
