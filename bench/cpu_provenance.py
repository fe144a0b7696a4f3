"""Where a CPU benchmark's numbers came from: machine, load, library versions, source commit.

``bench/bench_long_run.py`` and ``bench/bench_sweep.py`` write this into their results files.
Every field that cannot be read is ``None``, never a guess.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys

import numpy as np

import pagedkv
from pagedkv.lessons.kernel.provenance import git_commit


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (None elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def environment() -> dict[str, object]:
    """``date`` (UTC ISO 8601), ``python``, ``numpy``, ``pagedkv``, ``git`` (commit, dirty),
    ``cpu`` (model), ``cores`` (usable by this process), ``platform``, ``argv`` and the
    1-minute ``load_average`` when it starts (on a shared machine other processes' load
    stretches wall time; CPU seconds are the fairer figure)."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "numpy": np.__version__,
        "pagedkv": pagedkv.__version__, "git": git_commit(), "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "platform": platform.platform(), "argv": sys.argv,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
