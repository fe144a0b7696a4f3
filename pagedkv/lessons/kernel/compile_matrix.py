"""Every launched kernel compiled for every target, in child processes, cached as JSON.

``compiled.compile_build`` needs triton imported with ``TRITON_INTERPRET=0``; the book and
the CPU tests import it with ``TRITON_INTERPRET=1``. So :func:`compile_matrix` starts one
child Python per target (``python -m pagedkv.lessons.kernel.compile_matrix 90``), which
prints its rows as JSON, and keeps the merged table under :func:`cache_dir`, keyed by a hash
of the kernel sources, the compile code and triton's version: a second call, from the book
build or a test, reads the file instead of compiling again.

The table for the current sources also ships with pagedkv (:data:`SHIPPED`, written by
``python -m pagedkv.lessons.kernel.compile_matrix --ship``), so a fresh clone's book build
reads it instead of spending about two CPU-minutes compiling. Its name carries the same key:
any change to a source above (or another triton) misses it and compiles again. The tests
compile afresh and hold the shipped table equal to what the compiler gives
(tests/lessons/kernel/test_kernel_compiles.py).
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


SHIPPED = Path(__file__).resolve().parent / "compiled_tables"


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


def table_name(targets: tuple[int, ...] = TARGETS) -> str:
    """File name of the table for ``targets`` and the current sources."""
    return f"compiled-{_source_key(targets)}.json"


def compile_matrix(targets: tuple[int, ...] = TARGETS, timeout: float = 600,
                   use_cache: bool = True) -> list[dict[str, object]]:
    """Resources of every launched kernel on every target: rows of ``KernelResources``
    fields plus ``head_dim`` and ``group`` (or ``arch``, ``build`` and ``error``).

    Compiles in one child process per target, run side by side (about two CPU-minutes),
    unless a table for the same key is in :func:`cache_dir` or shipped (:data:`SHIPPED`);
    ``use_cache=False`` always compiles (and refreshes the cache).

    Raises:
        ConfigError: a target outside :data:`compiled.TARGETS`.
        PagedKVError: a child process failed (its stderr is in the message) or ran past
            ``timeout`` seconds.
    """
    for arch in targets:
        if arch not in TARGETS:
            raise bad_value("targets", targets, f"compute capabilities among {TARGETS}")
    path = cache_dir() / table_name(targets)
    if use_cache:
        for found in (path, SHIPPED / path.name):
            if found.is_file():
                return json.loads(found.read_text())
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


def ship(targets: tuple[int, ...] = TARGETS) -> Path:
    """Compile afresh and write the table into :data:`SHIPPED` (older tables there removed);
    returns its path."""
    rows = compile_matrix(targets, use_cache=False)
    SHIPPED.mkdir(exist_ok=True)
    for old in SHIPPED.glob("compiled-*.json"):
        old.unlink()
    path = SHIPPED / table_name(targets)
    path.write_text(json.dumps(rows, indent=1) + "\n")
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["--ship"]:
        print(f"wrote {ship()}")
    else:
        print(json.dumps([row for arch in sys.argv[1:] for row in compile_target(int(arch))]))
