"""``pagedkv simulate --sweep`` in worker processes (``--workers``) and on Ray (``--ray``):
the printed table, ``--json`` and the ``--plot`` file are the serial sweep's bytes."""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import pagedkv.entrypoints.cli_simulate_run as cli_run
import pagedkv.entrypoints.sweep_run as sweep_run
from pagedkv.entrypoints.cli import main
from pagedkv.entrypoints.cli_simulate_workload import build_workload
from pagedkv.workloads.synthetic import RequestSpec

EXAMPLES = Path(__file__).parents[2] / "pagedkv" / "workloads" / "examples"
CHAT = str(EXAMPLES / "chat.jsonl")
# four settings, no two rows alike: a pool too small to keep much of the conversations' history
# (4.8 % of prompt tokens from the radix cache) and one that keeps it (52 %), cache on and off
SWEEP = ["--requests-file", CHAT, "--sweep", "radix_cache=on,off", "--sweep", "max_total_tokens=4000,60000"]


def report(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, *extra: str
           ) -> tuple[int, bytes, bytes, bytes]:
    """Exit status, the printed table, the plot file and the ``--json`` output of one sweep."""
    plot = tmp_path / f"{name}.html"
    code = main(["simulate", "--quiet", *SWEEP, *extra, "--plot", str(plot)])
    text = capsys.readouterr().out.replace(str(plot), "PLOT")  # the plot's name is printed
    assert main(["simulate", "--quiet", *SWEEP, *extra, "--json"]) == code
    return code, text.encode(), plot.read_bytes(), capsys.readouterr().out.encode()


class RecordingPool(ProcessPoolExecutor):
    """A process pool that says how many workers it was asked for."""

    sizes: ClassVar[list[int]] = []

    def __init__(self, max_workers: int, **kwargs: object) -> None:
        RecordingPool.sizes.append(max_workers)
        super().__init__(max_workers, **kwargs)


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    RecordingPool.sizes = []
    monkeypatch.setattr(sweep_run, "ProcessPoolExecutor", RecordingPool)
    return RecordingPool.sizes


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, bytes, bytes, bytes]:
    """The reference: every setting one after another in this process."""
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("serial")
    plot, out, js = tmp / "serial.html", io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["simulate", "--quiet", *SWEEP, "--workers", "1", "--plot", str(plot)])
    with contextlib.redirect_stdout(js):
        assert main(["simulate", "--quiet", *SWEEP, "--workers", "1", "--json"]) == code
    text = out.getvalue().replace(str(plot), "PLOT")
    return code, text.encode(), plot.read_bytes(), js.getvalue().encode()


def test_the_serial_reference_differs_between_settings(serial: tuple[int, bytes, bytes, bytes]) -> None:
    code, text, plot, js = serial
    rows = [ln for ln in text.decode().splitlines() if ln.startswith("radix_cache=")]
    assert code == 0 and len(rows) == 4 and len(set(r.split(None, 2)[2] for r in rows)) == 4
    assert b'id="pagedkv-sweep"' in plot  # a fixed element id: the file's bytes repeat
    assert [r["setting"] for r in json.loads(js)["sweep"]] == [r.split("  ")[0] for r in rows]


@pytest.mark.parametrize("workers", ["2", "3"])
def test_workers_give_the_serial_bytes(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       serial: tuple[int, bytes, bytes, bytes], pools: list[int],
                                       workers: str) -> None:
    assert report(capsys, tmp_path, "w", "--workers", workers) == serial
    assert pools == [int(workers)] * 2  # the settings really ran in processes (text, then JSON)


def test_default_is_one_worker_per_core(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        serial: tuple[int, bytes, bytes, bytes], pools: list[int],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_run, "default_workers", lambda: 16)
    assert report(capsys, tmp_path, "d16") == serial
    assert pools == [4, 4]  # never more processes than settings
    monkeypatch.setattr(cli_run, "default_workers", lambda: 1)
    assert report(capsys, tmp_path, "d1") == serial
    assert len(pools) == 2  # one core: no pool, the serial path


def test_spawned_workers_give_the_serial_bytes(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               serial: tuple[int, bytes, bytes, bytes],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Where there is no fork server (Windows) workers are spawned: the requests and pools
    are pickled to them as to the fork server's, and the report is the same."""
    monkeypatch.setattr(sweep_run.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert report(capsys, tmp_path, "s", "--workers", "2") == serial


def test_a_refused_request_in_a_worker_is_the_serial_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A 300-token pool cannot take the first 473-token prompt: the run refuses it inside
    the worker and the error comes back with its message alone, as serially (exit 2)."""
    errors = []
    for workers in ("1", "2"):
        code = main(["simulate", "--quiet", "--requests-file", CHAT, "--sweep", "max_total_tokens=50000,300",
                     "--workers", workers])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        errors.append(err)
    assert errors[0] == errors[1]
    assert (f"request 0 (line 1 of {CHAT}) prompt_len=473 is invalid; valid: "
            "< max_req_input_len=294") in errors[1]


def test_ctrl_c_keeps_the_settings_that_had_finished(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     serial: tuple[int, bytes, bytes, bytes]) -> None:
    """Ctrl-C after the first finished setting: the pool is stopped, the report has that
    setting's row (the serial one's) and says what was left out; exit status 130."""
    real = sweep_run.as_completed

    def interrupted(futures: list) -> object:
        it = real(futures)
        yield next(it)
        raise KeyboardInterrupt

    stopped = []
    monkeypatch.setattr(sweep_run, "as_completed", interrupted)
    stop = sweep_run._stop_pool
    monkeypatch.setattr(sweep_run, "_stop_pool", lambda pool: stopped.append(stop(pool)))
    code = main(["simulate", "--quiet", *SWEEP, "--workers", "2"])
    out = capsys.readouterr().out
    assert code == 130 and len(stopped) == 1
    assert "INTERRUPTED (Ctrl-C) with 1 of 4 settings finished; the others are left out" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("radix_cache=")]
    serial_rows = serial[1].decode().splitlines()
    assert len(rows) == 1 and rows[0].split(None, 2)[2] in {r.split(None, 2)[2] for r in serial_rows
                                                            if r.startswith("radix_cache=")}


def _values(entry: object) -> list[object]:
    """A request's fields, token-id arrays as lists (arrays do not compare with ==)."""
    return [v.tolist() if isinstance(v, np.ndarray) else v
            for v in (getattr(entry, f.name) for f in dataclasses.fields(RequestSpec))]


def test_the_workload_pickles(capsys: pytest.CaptureFixture[str]) -> None:
    """What worker processes and Ray tasks receive: the same requests after a round trip."""
    for argv in (["--requests-file", CHAT, "--rate", "3"], ["--workload", "chat", "--num-requests", "20"]):
        from pagedkv.entrypoints.cli import build_parser

        args = build_parser().parse_args(["simulate", *argv])
        workload = build_workload(args)
        again = pickle.loads(pickle.dumps(workload))
        specs = [_values(e) for e in workload.make_specs()]
        assert specs and [_values(e) for e in again.make_specs()] == specs
        assert again.description == workload.description


@pytest.mark.parametrize(("argv", "message"), [
    (["--sweep", "page_size=1,16", "--workers", "0"], "--workers=0 is invalid; valid: an integer >= 1"),
    (["--sweep", "page_size=1,16", "--workers", "-2"], "--workers=-2 is invalid; valid: an integer >= 1"),
    (["--workers", "2"], "--workers=2 is invalid; valid: only with --sweep"),
    (["--ray"], "--ray='' is invalid; valid: only with --sweep"),
    (["--sweep", "page_size=1,16", "--workers", "2", "--ray", "auto"],
     "--workers=2 is invalid; valid: only without --ray"),
])
def test_bad_parallel_flags_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code = main(["simulate", "--quiet", "--requests-file", CHAT, *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_ray_missing_is_a_clear_error(capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    code = main(["simulate", "--quiet", *SWEEP, "--ray"])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'pagedkv[ray]'" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def local_ray() -> object:
    """A Ray instance on this machine, two CPUs, for this module's Ray tests."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'pagedkv[ray]')")
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_serial_bytes(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    serial: tuple[int, bytes, bytes, bytes], local_ray: object,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    put = local_ray.put
    shared = []
    monkeypatch.setattr(local_ray, "put", lambda value: shared.append(value) or put(value))
    assert report(capsys, tmp_path, "r", "--ray") == serial
    assert len(shared) == 2  # the requests went to Ray's object store, once per sweep
    assert local_ray.is_initialized()  # the test's instance: the sweep leaves it running


def test_ray_refusal_is_the_serial_error(capsys: pytest.CaptureFixture[str], local_ray: object) -> None:
    argv = ["simulate", "--quiet", "--requests-file", CHAT, "--sweep", "max_total_tokens=50000,300"]
    assert main([*argv, "--workers", "1"]) == 2
    serial_err = capsys.readouterr().err
    assert main([*argv, "--ray"]) == 2
    err = capsys.readouterr().err  # Ray may add its own log lines
    assert serial_err.strip() in err and "Traceback" not in err


def test_parser_has_the_flags() -> None:
    from pagedkv.entrypoints.cli import build_parser

    args = build_parser().parse_args(["simulate", "--ray"])
    assert args.ray == "" and args.workers is None
    args = build_parser().parse_args(["simulate", "--ray", "ray://head:10001", "--workers", "3"])
    assert args.ray == "ray://head:10001" and args.workers == 3
