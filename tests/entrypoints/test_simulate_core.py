"""``pagedkv simulate --core``: the compiled step core gives the reference's report, and says
so when it cannot run a configuration; ``choose_core``'s rules."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from pagedkv.entrypoints.cli_simulate import add_simulate_parser, run_simulate
from pagedkv.entrypoints.simulation import simulated_engine
from pagedkv.errors import ConfigError
from pagedkv.managers.compiled_core import AUTO_MIN_REQUESTS, choose_core, numba_available
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.workloads.synthetic import sharegpt_like

needs_numba = pytest.mark.skipif(not numba_available(), reason="numba is not installed")


def simulate(tmp_path: Path, core: str, *extra: str) -> bytes:
    """One CLI run (its report on stdout, a note on stderr); its per-request CSV."""
    parser = argparse.ArgumentParser(prog="pagedkv")
    add_simulate_parser(parser.add_subparsers(dest="command", required=True))
    csv = tmp_path / f"{core}.csv"
    args = parser.parse_args(["simulate", "--num-requests", "400", "--rate", "30", "--quiet",
                              "--max-total-tokens", "30000", "--log", "--csv", str(csv),
                              "--core", core, *extra])
    assert run_simulate(args) == 0
    return csv.read_bytes()


@needs_numba
@pytest.mark.parametrize("extra", [("--disable-radix-cache",),
                                   ("--disable-radix-cache", "--page-size", "16",
                                    "--sglang-version", "0.5.9", "--disable-overlap-schedule"),
                                   ("--workload", "system-prompt", "--page-size", "16")])
def test_compiled_core_prints_the_reference_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   extra: tuple[str, ...]) -> None:
    reports = []
    for core in ("reference", "compiled"):
        csv = simulate(tmp_path, core, *extra)
        out = capsys.readouterr()
        assert out.err == ""
        text = re.sub(r"[\d.,]+ s of wall time", "", out.out.replace(str(tmp_path / core), ""))
        reports.append((text, csv))
    assert reports[0] == reports[1]
    assert "Decode batch" in reports[0][0]  # the log lines are compared too


def test_compiled_core_asked_where_it_does_not_apply_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A teaching admission policy: a one-line note, and the reference's run."""
    simulate(tmp_path, "compiled", "--policy", "reserve_all")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compiled core does not cover" in err
    assert ("a teaching admission policy" in err) or ("numba is not installed" in err)


def test_choose_core_rules() -> None:
    engine = simulated_engine(radix_cache=False, max_total_tokens=20000)
    sched = engine.scheduler(sharegpt_like(10, seed=1), trace=SummaryTrace(engine.meta))
    with pytest.raises(ConfigError, match="core"):
        choose_core(sched, "fast")
    assert choose_core(engine.scheduler([]), "compiled")[1] is not None  # a full Trace
    assert choose_core(sched, "reference") == (False, None)
    assert choose_core(sched, "auto") == (False, None)  # shorter than AUTO_MIN_REQUESTS
    assert AUTO_MIN_REQUESTS > 10
    compiled, note = choose_core(sched, "compiled", check=True)
    assert not compiled and note is not None and "invariant checks" in note
    if numba_available():
        assert choose_core(sched, "compiled") == (True, None)
        result = engine.run_scheduler(sched, core="compiled")
        assert result.core == "compiled" and result.metrics.num_requests == 10
        assert json.dumps(result.metrics.num_steps)  # a plain int


def test_auto_without_numba_says_so_for_a_long_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto on a run it would compile, numba missing: the Python loop and a note; on a short
    run: no note."""
    import pagedkv.managers.compiled_core as core

    engine = simulated_engine(radix_cache=False, max_total_tokens=20000)
    sched = engine.scheduler(sharegpt_like(10, seed=1), trace=SummaryTrace(engine.meta))
    monkeypatch.setattr(core, "numba_available", lambda: False)
    assert choose_core(sched, "auto") == (False, None)
    compiled, note = choose_core(sched, "compiled")
    assert not compiled and "numba is not installed" in note
    monkeypatch.setattr(core, "AUTO_MIN_REQUESTS", 5)
    compiled, note = choose_core(sched, "auto")
    assert not compiled and note.startswith("note: numba is not installed")


@needs_numba
def test_ctrl_c_between_calls_keeps_what_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the compiled core hands control back (every STEPS_PER_CALL steps): an
    interrupted result over the requests that had finished, as the Python loop gives."""
    from pagedkv.managers.compiled_core import runner

    monkeypatch.setattr(runner, "STEPS_PER_CALL", 100)
    engine = simulated_engine(radix_cache=False, max_total_tokens=20000)
    sched = engine.scheduler(sharegpt_like(300, rate=20, seed=1), trace=SummaryTrace(engine.meta))
    seen: list[int] = []

    def on_step(s: object) -> None:
        seen.append(sched.num_finished)
        if len(seen) == 3:
            raise KeyboardInterrupt

    result = engine.run_scheduler(sched, on_step=on_step, interruptible=True, core="compiled")
    done = [r for r in sched.reqs if r.finish_s is not None]
    assert result.interrupted and result.core == "compiled"
    assert 0 < len(done) == sched.num_finished == result.metrics.num_requests < 300
    assert result.metrics.num_steps == sched.num_steps == 300


def test_engine_core_is_checked_and_is_the_default() -> None:
    """``Engine(core=...)`` (``simulated_engine(core=...)``): a bad name refused; the default
    that ``run_scheduler`` and sweeps take."""
    with pytest.raises(ConfigError, match="core"):
        simulated_engine(radix_cache=False, max_total_tokens=20000, core="fastest")
    engine = simulated_engine(radix_cache=False, max_total_tokens=20000, core="compiled",
                              disable_overlap_schedule=True)
    sched = engine.scheduler(sharegpt_like(20, rate=10, seed=2), trace=SummaryTrace(engine.meta))
    result = engine.run_scheduler(sched)
    assert result.core == ("compiled" if numba_available() else "reference")
    assert simulated_engine(max_total_tokens=20000).core == "reference"
