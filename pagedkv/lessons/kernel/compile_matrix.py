"""Every launched kernel compiled for every target, in child processes, cached as JSON.

``compiled.compile_build`` needs triton imported with ``TRITON_INTERPRET=0``; the book and
the CPU tests import it with ``TRITON_INTERPRET=1``. So :func:`compile_matrix` starts one
child Python per target (``python -m pagedkv.lessons.kernel.compile_matrix 90``), which
prints its rows as JSON, and keeps the merged table under :func:`cache_dir`, keyed by a hash
of the kernel sources, the compile code and triton's version: a second call, from the book
build or a test, reads the file instead of compiling again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from pagedkv.errors import PagedKVError, bad_value
from pagedkv.lessons.kernel.compiled import (
    TARGETS,
    compile_build,
    contrast_builds,
    launched_builds,
)

# Paths under the pagedkv package: the compile code here and the kernel it compiles.
SOURCES = ("lessons/kernel/compiled.py", "lessons/kernel/compile_matrix.py",
           "layers/attention/decode_attention.py", "lessons/kernel/cases.py",
           "layers/attention/checks.py")


def compile_target(arch: int) -> list[dict[str, object]]:
    """Rows for one target: every launched build, stage 2 once per distinct kernel, and the
    fp32-dot contrast from sm_80 on (on sm_75 every dot is fp32 already). A build that does
    not compile is a row with an ``"error"``, so one failure does not hide the others."""
    rows, seen = [], set()
    builds = launched_builds() + (contrast_builds() if arch >= 80 else [])
    for build in builds:
        try:
            found = compile_build(build, arch)
        except Exception as exc:  # reported in the table, not hidden
            rows.append({"arch": arch, "build": asdict(build), "error": repr(exc)[:2000]})
            continue
        group = build.num_q_heads // build.num_kv_heads
        for res in found:
            if build.dot_fp32 and res.kernel == "stage2":
                continue  # the contrast is about stage 1's dots
            key = (res.kernel, res.dtype, res.page_size, res.purpose, res.dot_fp32,
                   build.head_dim, group)
            if key not in seen:
                seen.add(key)
                rows.append({**asdict(res), "head_dim": build.head_dim, "group": group})
    return rows


def cache_dir() -> Path:
    """Where compile tables are kept: ``$PAGEDKV_CACHE`` or ``~/.cache/pagedkv``."""
    return Path(os.environ.get("PAGEDKV_CACHE", Path.home() / ".cache" / "pagedkv"))


def _source_key(targets: tuple[int, ...]) -> str:
    """Hash of what the table depends on: the sources above, triton's version, the targets."""
    import triton

    package = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256(f"{triton.__version__} {targets}".encode())
    for name in SOURCES:
        digest.update((package / name).read_bytes())
    return digest.hexdigest()[:16]


def compile_matrix(targets: tuple[int, ...] = TARGETS, timeout: float = 600,
                   use_cache: bool = True) -> list[dict[str, object]]:
    """Resources of every launched kernel on every target: rows of ``KernelResources``
    fields plus ``head_dim`` and ``group`` (or ``arch``, ``build`` and ``error``).

    Compiles in one child process per target, run side by side (about a minute on two CPU
    cores), unless a cached table matches.

    Raises:
        ConfigError: a target outside :data:`compiled.TARGETS`.
        PagedKVError: a child process failed (its stderr is in the message) or ran past
            ``timeout`` seconds.
    """
    for arch in targets:
        if arch not in TARGETS:
            raise bad_value("targets", targets, f"compute capabilities among {TARGETS}")
    path = cache_dir() / f"compiled-{_source_key(targets)}.json"
    if use_cache and path.is_file():
        return json.loads(path.read_text())
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    children = [subprocess.Popen([sys.executable, "-m", __name__, str(arch)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for arch in targets]
    rows: list[dict[str, object]] = []
    try:
        for arch, child in zip(targets, children, strict=True):
            out, err = child.communicate(timeout=timeout)
            if child.returncode != 0 or not out.strip():
                raise PagedKVError(f"compiling for sm_{arch} failed (exit {child.returncode}):"
                                   f"\n{err[-3000:]}")
            rows += json.loads(out)
    except subprocess.TimeoutExpired as exc:
        raise PagedKVError(f"compiling took longer than {timeout} s") from exc
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # readers never see half a file
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(path)
    return rows


if __name__ == "__main__":
    print(json.dumps([row for arch in sys.argv[1:] for row in compile_target(int(arch))]))
