"""Visualizer runs on disk: read back instead of simulated, and never read when anything
they depend on changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pagedkv.entrypoints import simulate
from pagedkv_widgets.catalog import CATALOG
from pagedkv_widgets.chapters import chapter_config, resolve_settings
from pagedkv_widgets.run_cache import RunCache, default_folder, digest_of
from pagedkv_widgets.scenes import SceneRunner
from pagedkv_widgets.static_page import build_grid


def counting_runner(cache: RunCache | None) -> tuple[SceneRunner, list[int]]:
    """A runner over the real simulator that counts its simulations."""
    calls: list[int] = []

    def counted(*args, **kwargs):
        calls.append(1)
        return simulate(*args, **kwargs)

    runner = SceneRunner(simulate=counted, workloads=CATALOG.workloads,
                         teaching_model=CATALOG.defaults.model,
                         teaching_gpu=CATALOG.defaults.gpu, cache=cache)
    return runner, calls


def test_a_second_runner_reads_the_run_back(tmp_path: Path) -> None:
    s = resolve_settings(CATALOG, "paging")
    first, calls = counting_runner(RunCache(tmp_path))
    run = first.run("pool", s, True)
    assert calls == [1] and len(list(tmp_path.rglob("*.json.gz"))) == 1
    second, calls = counting_runner(RunCache(tmp_path))
    assert second.run("pool", s, True) == run and calls == []
    uncached, calls = counting_runner(None)
    assert uncached.run("pool", s, True) == run and calls == [1]


def test_other_arguments_or_environment_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = resolve_settings(CATALOG, "paging")
    runner, calls = counting_runner(RunCache(tmp_path))
    runner.run("pool", s, True)
    runner, calls = counting_runner(RunCache(tmp_path))
    runner.run("pool", resolve_settings(CATALOG, "paging", page_size=4), True)
    runner.run("pool", resolve_settings(CATALOG, "paging", workload="calm"), True)
    assert calls == [1, 1]
    monkeypatch.setenv("SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", "300")
    runner, calls = counting_runner(RunCache(tmp_path))
    runner.run("pool", s, True)
    assert calls == [1]
    runner, calls = counting_runner(RunCache(tmp_path, digest="another-source"))
    runner.run("pool", s, True)
    assert calls == [1]


def test_a_damaged_file_is_simulated_again(tmp_path: Path) -> None:
    s = resolve_settings(CATALOG, "paging")
    runner, _ = counting_runner(RunCache(tmp_path))
    run = runner.run("pool", s, True)
    for path in tmp_path.rglob("*.json.gz"):
        path.write_bytes(path.read_bytes()[:100])
    runner, calls = counting_runner(RunCache(tmp_path))
    assert runner.run("pool", s, True) == run and calls == [1]


def test_a_rebuilt_grid_simulates_nothing(tmp_path: Path) -> None:
    config = chapter_config(CATALOG, "paging", resolve_settings(CATALOG, "paging"))
    runner, calls = counting_runner(RunCache(tmp_path))
    grid = build_grid(config, runner, workers=1)
    assert len(calls) == 30  # 10 fractions x 3 page sizes
    runner, calls = counting_runner(RunCache(tmp_path))
    assert build_grid(config, runner, workers=1) == grid and calls == []


def test_the_digest_follows_every_source_file(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    roots = {"pkg": tmp_path / "pkg"}
    before = digest_of(roots)
    (tmp_path / "pkg" / "notes.txt").write_text("not source")
    assert digest_of(roots) == before
    (tmp_path / "pkg" / "sub" / "b.json").write_text("{}")
    added = digest_of(roots)
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert len({before, added, digest_of(roots)}) == 3


def test_where_the_cache_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PAGEDKV_RUN_CACHE", raising=False)
    monkeypatch.setenv("PAGEDKV_CACHE", str(tmp_path))
    assert default_folder() == tmp_path / "runs"
    monkeypatch.setenv("PAGEDKV_RUN_CACHE", str(tmp_path / "elsewhere"))
    assert default_folder() == tmp_path / "elsewhere"
    for off in ("off", "0", ""):
        monkeypatch.setenv("PAGEDKV_RUN_CACHE", off)
        assert default_folder() is None


def test_an_unwritable_folder_only_costs_time(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would go")
    runner, calls = counting_runner(RunCache(blocked))
    s = resolve_settings(CATALOG, "paging")
    assert "error" not in runner.run("pool", s, True) and calls == [1]
    assert os.listdir(tmp_path) == ["file"]
