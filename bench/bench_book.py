"""The book build's cost: each chapter executed alone, its wall and CPU seconds, its slowest cells.

Each notebook of ``book/`` runs in a fresh kernel (as ``jupyter-book build`` runs them, with
``PAGEDKV_BOOK_BUILD=1``: the visualizers build their static grids), one after the other.
CPU seconds are the kernel's and everything it started (the static visualizer's worker
processes included): user + system time of the kernel process and of
its waited-for children, read with ``psutil`` around each cell and once more after the
kernel has exited. Target (the book's build budget): all chapters in at most 6 CPU-minutes,
no cell above 60 s.

    PYTHONPATH=. python bench/bench_book.py [--chapters 05 07] [--top 5] [--out bench/results]

Writes ``<out>/book-<UTC time>.json``: the commit, load and versions it ran on
(``cpu_provenance.environment``), whether the visualizers' run cache was on
(``PAGEDKV_RUN_CACHE=off`` measures a clean build), and per chapter ``wall_s``, ``cpu_s`` and the ``top``
slowest cells (``index``, ``wall_s``, ``cpu_s``, first source line); prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import psutil
from cpu_provenance import environment
from nbclient import NotebookClient

from pagedkv_widgets.budget import BOOK_BUILD_ENV

ROOT = Path(__file__).resolve().parents[1]
BUDGET_CPU_S = 360.0  # 6 CPU-minutes for the whole book
CELL_LIMIT_S = 60.0


def _children_cpu() -> float:
    """CPU seconds of this process's finished, waited-for descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and of its waited-for children so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def run_chapter(path: Path, timeout: int = 600) -> dict[str, Any]:
    """Execute ``path`` in a fresh kernel (working directory: its folder); return its cost.

    Returns ``{"chapter", "wall_s", "cpu_s", "cells": [{"index", "wall_s", "cpu_s",
    "source"}, ...]}``, one entry per code cell, in order.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (the build would fail too).
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    cells: list[dict[str, Any]] = []
    started: dict[str, float] = {}

    def pid() -> int:
        return client.km.provisioner.process.pid

    def before(cell: Any, cell_index: int, **_: Any) -> None:
        started.update(wall=time.perf_counter(), cpu=_process_cpu(pid()))

    def after(cell: Any, cell_index: int, **_: Any) -> None:
        first = next((line for line in cell.source.splitlines() if line.strip()), "")
        cells.append({"index": cell_index, "wall_s": time.perf_counter() - started["wall"],
                      "cpu_s": _process_cpu(pid()) - started["cpu"], "source": first[:80]})

    client.on_cell_execute = before
    client.on_cell_executed = after
    os.environ[BOOK_BUILD_ENV] = "1"  # as the book's Sphinx extension: static visualizers
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    client.execute()  # starts the kernel, runs every cell, shuts the kernel down (waited for)
    return {"chapter": path.name, "wall_s": time.perf_counter() - wall0,
            "cpu_s": _children_cpu() - cpu0, "cells": cells}


def main(argv: list[str] | None = None) -> int:
    """Run the chapters, print the table, write the JSON; exit 1 over budget."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chapters", nargs="*", default=None,
                    help="chapter number prefixes (default: every book/*.ipynb)")
    ap.add_argument("--top", type=int, default=5, help="slowest cells kept per chapter")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    paths = sorted((ROOT / "book").glob("*.ipynb"))
    if args.chapters:
        paths = [p for p in paths if any(p.name.startswith(c) for c in args.chapters)]
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / time.strftime("book-%Y%m%dT%H%M%SZ.json", time.gmtime())
    chapters: list[dict[str, Any]] = []
    env = environment()
    for path in paths:
        result = run_chapter(path)
        result["cells"] = sorted(result["cells"], key=lambda c: -c["wall_s"])
        slowest = result["cells"][0] if result["cells"] else {"wall_s": 0.0, "index": None}
        print(f"{path.name:<32} wall {result['wall_s']:7.1f} s  cpu {result['cpu_s']:7.1f} s  "
              f"slowest cell #{slowest['index']}: {slowest['wall_s']:6.1f} s", flush=True)
        result["cells"] = result["cells"][:args.top]
        chapters.append(result)
        cpu = sum(c["cpu_s"] for c in chapters)
        target.write_text(json.dumps({  # after each chapter: a failed chapter keeps the others
            "machine": {"cpus": psutil.cpu_count(), "python": sys.version.split()[0],
                        "platform": platform.platform()},
            # commit, load when it started, versions; and whether the run cache could answer
            "environment": env, "run_cache": os.environ.get("PAGEDKV_RUN_CACHE", "default"),
            "budget_cpu_s": BUDGET_CPU_S, "cell_limit_s": CELL_LIMIT_S,
            "total_cpu_s": cpu, "chapters": chapters}, indent=1) + "\n")
    cpu = sum(c["cpu_s"] for c in chapters)
    worst = max((c["cells"][0]["wall_s"] for c in chapters if c["cells"]), default=0.0)
    print(f"{'total':<32} wall {sum(c['wall_s'] for c in chapters):7.1f} s  cpu {cpu:7.1f} s  "
          f"(budget {BUDGET_CPU_S:.0f} s; slowest cell {worst:.1f} s, limit {CELL_LIMIT_S:.0f} s)")
    print(f"wrote {target}")
    over = cpu > BUDGET_CPU_S or worst > CELL_LIMIT_S
    return 1 if over and len(chapters) == len(sorted((ROOT / "book").glob("*.ipynb"))) else 0


if __name__ == "__main__":
    raise SystemExit(main())
