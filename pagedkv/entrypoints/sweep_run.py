"""Run a sweep's settings: one after another in this process, in worker processes, or as
tasks on a Ray cluster (``pagedkv simulate --sweep ... [--workers N | --ray [ADDRESS]]``).

Each setting is one whole run (:func:`run_setting`): the same requests, its own pool. A run
depends only on its setting and the requests, never on another run, so settings run
anywhere in any order give the numbers the serial sweep gives; the results come back as
small :class:`SettingResult` objects (the table row, the trace's meta, the summary) and
are reported in setting order by the caller, so the table, ``--json`` and ``--plot`` are
the same bytes whichever way they ran.

Worker processes come from a fork server where the platform has one (Linux, macOS), else
they are spawned: never forked from this process, whose other threads (torch's, a test
runner's) may hold a lock at the moment of a fork and leave the child waiting on it for
ever. The fork server imports pagedkv once; each worker receives the requests and the pools
once, pickled. Ray tasks take one CPU each;
the requests are put in Ray's object store once and every task reads them from there, so a
cluster's nodes need ``pagedkv`` (and Ray) installed but not the requests file.

Ctrl-C: a serial sweep stops in the setting it is running (marked partial, the rest left
out); a parallel one cancels what is still running and reports the settings that had
finished. Worker processes ignore Ctrl-C so that only this process decides.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from pagedkv.entrypoints.cli_simulate_workload import Workload
from pagedkv.entrypoints.engine import Engine
from pagedkv.entrypoints.long_run import PROGRESS_DELAY_S, run_requests
from pagedkv.entrypoints.sweep import label, sweep_row
from pagedkv.errors import ConfigError, PagedKVError, bad_value


@dataclass(frozen=True)
class SettingResult:
    """One setting's results, small enough to send between processes.

    Attributes:
        row: the table's and the plot's numbers (:func:`pagedkv.entrypoints.sweep.sweep_row`).
        meta: the run's trace meta (:meth:`TraceMeta.to_dict`).
        summary: :meth:`RequestTable.summary` of the finished requests.
    """

    row: dict[str, Any]
    meta: dict[str, Any]
    summary: dict[str, Any]

    @property
    def interrupted(self) -> bool:
        """Ctrl-C stopped this setting's run before every request finished."""
        return bool(self.row["interrupted"])


@dataclass(frozen=True)
class SweepOutcome:
    """The settings that ran, in setting order.

    Attributes:
        results: one per finished (or, serially, interrupted) setting, in setting order.
        interrupted: None, or what Ctrl-C left out, as one line for the report.
    """

    results: list[SettingResult]
    interrupted: str | None


def run_setting(engine: Engine, workload: Workload, combo: dict[str, object], *,
                quiet: bool = True, bar_label: str = "requests") -> SettingResult:
    """Run ``workload`` on ``engine`` (the pool of ``combo``) and keep what the report needs.

    Raises:
        ConfigError: a request SGLang would refuse on this pool (see :class:`Scheduler`).
    """
    run = run_requests(engine, workload.make_specs(), workload.num_requests, source=workload.source,
                       quiet=quiet, label=bar_label)
    return SettingResult(sweep_row(combo, run), run.engine.meta.to_dict(), run.table.summary())


def _run_or_error(engine: Engine, workload: Workload, combo: dict[str, object]
                  ) -> SettingResult | PagedKVError:
    """:func:`run_setting` in a worker: pagedkv's own errors come back as values, to be raised
    in the caller with their message alone (no remote traceback)."""
    try:
        return run_setting(engine, workload, combo)
    except PagedKVError as exc:
        return exc


def run_serial(engines: list[Engine], combos: list[dict[str, object]], workload: Workload,
               quiet: bool) -> SweepOutcome:
    """Every setting in this process, one after another, each with its own progress bar;
    Ctrl-C ends the sweep in the setting it lands in."""
    results = []
    for i, (combo, engine) in enumerate(zip(combos, engines, strict=True)):
        results.append(run_setting(engine, workload, combo, quiet=quiet,
                                   bar_label=f"{i + 1}/{len(combos)} {label(combo)}"))
        if results[-1].interrupted:
            return SweepOutcome(results, f"in setting {i + 1} of {len(combos)}")
    return SweepOutcome(results, None)


def default_workers() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_WORK: tuple[Workload, list[Engine]] | None = None  # a worker process's requests and pools


def _init_worker(workload: Workload, engines: list[Engine]) -> None:
    global _WORK
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _WORK = (workload, engines)


def _run_index(index: int, combo: dict[str, object]) -> SettingResult | PagedKVError:
    assert _WORK is not None, "_init_worker runs first in every worker"
    workload, engines = _WORK
    return _run_or_error(engines[index], workload, combo)


def run_processes(engines: list[Engine], combos: list[dict[str, object]], workload: Workload,
                  workers: int, quiet: bool) -> SweepOutcome:
    """The settings in ``workers`` processes at once (at most one per setting).

    Raises:
        ConfigError: ``workers`` < 1, or the first setting, in order, whose run refused a
            request.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise bad_value("--workers", workers, "an integer >= 1")
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload([__name__])  # workers start with pagedkv imported
    pool = ProcessPoolExecutor(min(workers, len(combos)), mp_context=context,
                               initializer=_init_worker, initargs=(workload, engines))
    try:
        futures = [pool.submit(_run_index, i, combo) for i, combo in enumerate(combos)]
        return _collect(futures, lambda: _stop_pool(pool), quiet)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C: drop the settings not started and end the running ones now."""
    processes = list(getattr(pool, "_processes", {}).values())  # the executor offers no kill
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def run_ray(engines: list[Engine], combos: list[dict[str, object]], workload: Workload,
            address: str | None, quiet: bool) -> SweepOutcome:
    """Each setting as a Ray task of one CPU. ``address``: a cluster (``auto``,
    ``HOST:PORT``, ``ray://HOST:10001``), or None: the one Ray is already connected to in
    this process, else ``RAY_ADDRESS``'s, else a Ray instance started here for the sweep
    (and stopped after it).

    Raises:
        ConfigError: Ray is not installed, did not start or did not answer, or the first
            setting, in order, whose run refused a request.
    """
    try:
        import ray
    except ImportError:
        raise bad_value("--ray", address or "", "installed Ray first: pip install 'pagedkv[ray]'") from None
    started = not ray.is_initialized()
    if started:
        local = not address and not os.environ.get("RAY_ADDRESS")
        try:  # a sweep needs no dashboard; a local one started without it starts faster
            ray.init(address=address or None, **({"include_dashboard": False} if local else {}))
        except Exception as exc:  # Ray raises plain Exception, ConnectionError, ValueError...
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            where = f"the cluster at {address}" if address else "Ray on this machine"
            raise ConfigError(f"--ray: {where} did not start or answer: {reason}") from None
    try:
        task = ray.remote(num_cpus=1)(_run_or_error)
        shared = ray.put(workload)  # once: every task reads the same requests
        refs = [task.remote(engine, shared, combo) for engine, combo in zip(engines, combos, strict=True)]

        def cancel() -> None:
            for ref in refs:
                ray.cancel(ref, force=True)

        return _collect([ref.future() for ref in refs], cancel, quiet)
    finally:
        if started:
            ray.shutdown()


def _collect(futures: list[Future], cancel: Callable[[], None], quiet: bool) -> SweepOutcome:
    """Wait for every setting (a progress bar of settings on a terminal), then return them in
    setting order; raise the first setting's error, in order, if any refused a request.
    Ctrl-C calls ``cancel`` and returns the settings that had finished."""
    index = {id(f): i for i, f in enumerate(futures)}
    done: dict[int, SettingResult | PagedKVError] = {}
    bar = tqdm(total=len(futures), unit="setting", desc="settings", file=sys.stderr,
               delay=PROGRESS_DELAY_S, disable=quiet or not sys.stderr.isatty(), dynamic_ncols=True)
    interrupted = None
    try:
        for future in as_completed(futures):
            done[index[id(future)]] = future.result()
            bar.update(1)
    except KeyboardInterrupt:
        cancel()
        interrupted = f"with {len(done)} of {len(futures)} settings finished; the others are left out"
    finally:
        bar.close()
    ordered = [done[i] for i in sorted(done)]
    for result in ordered:
        if isinstance(result, PagedKVError):
            raise result
    return SweepOutcome(ordered, interrupted)  # type: ignore[arg-type]
