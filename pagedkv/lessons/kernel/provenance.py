"""Where a kernel measurement came from: GPU, clocks, driver, library versions, source commit.

``bench/bench_decode.py`` writes this into every results file, and chapter 6 prints it next
to every plotted number, so a reader can tell which machine and which code produced it.
Every field that cannot be read is ``None``, never a guess.
"""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from pathlib import Path

import torch

import pagedkv

ROOT = Path(__file__).resolve().parents[3]  # the checkout, when pagedkv runs from one
SMI_FIELDS = ("driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
              "power.limit", "pstate")


def _run(command: list[str]) -> str | None:
    """A command's stripped stdout, or None when it is missing or fails."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def git_commit() -> dict[str, object]:
    """The checkout's commit and whether it had uncommitted changes (None outside git)."""
    commit = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    status = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": None if commit is None else bool(status)}


def nvidia_smi() -> dict[str, str | None]:
    """Driver version and current / maximum SM and memory clocks of GPU 0 (MHz), power limit
    and performance state, as ``nvidia-smi`` reports them."""
    out = _run(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(SMI_FIELDS)}",
                "--format=csv,noheader"])
    values = [v.strip() for v in out.split(",")] if out else []
    if len(values) != len(SMI_FIELDS):
        return dict.fromkeys(SMI_FIELDS)
    return dict(zip(SMI_FIELDS, values, strict=True))


def environment(cuda: bool) -> dict[str, object]:
    """Everything a results file records about its run.

    Returns:
        ``date`` (UTC ISO 8601), ``python``, ``torch``, ``cuda`` (torch's build), ``triton``,
        ``flashinfer`` (None when missing), ``pagedkv``, ``git`` (commit, dirty), and with
        CUDA: ``gpu`` (name), ``compute_capability`` (``"sm_90"``), ``sm_count``,
        ``memory_bytes``, ``driver`` and ``clocks`` (``nvidia-smi``). Without CUDA ``gpu`` is
        None and ``device`` says the timings are the interpreter's.
    """
    import triton

    env: dict[str, object] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "triton": triton.__version__,
        "pagedkv": pagedkv.__version__, "git": git_commit(),
    }
    try:
        import flashinfer

        env["flashinfer"] = getattr(flashinfer, "__version__", "unknown")
    except ImportError:
        env["flashinfer"] = None
    if not cuda:
        env["gpu"] = None
        env["device"] = "cpu (TRITON_INTERPRET=1): interpreter timings, not a GPU measurement"
        return env
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    smi = nvidia_smi()
    env.update({
        "gpu": props.name, "compute_capability": f"sm_{props.major}{props.minor}",
        "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory,
        "driver": smi.pop("driver_version"), "clocks": smi,
    })
    return env
