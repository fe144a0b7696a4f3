"""The front door, as SGLang's ``srt/entrypoints/``: what a user calls, above the scheduler.

Modules: ``engine`` (:class:`Engine`: one scheduler over a real model or the simulated
executor; ``engine_outcome``: clamped caps and wall-clock latencies of a run),
``simulation`` (``simulate``: size the pool SGLang would build for a model on a GPU preset,
then run the scheduler), ``trace_run`` (a long run with progress and Ctrl-C), ``sweep``,
``sweep_run`` and ``sweep_plot`` (a grid of runs, in parallel), and the one ``pagedkv``
command, ``cli``, with its subcommands: ``size`` (in ``cli``), ``simulate`` (``cli_simulate``,
``cli_simulate_workload``, ``cli_simulate_run``, ``cli_simulate_output``) and ``generate``
(``cli_generate``, ``cli_generate_output``). Nothing under ``pagedkv.managers`` imports from
here.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pagedkv.entrypoints.engine import Engine, EngineResult
    from pagedkv.entrypoints.simulation import SimResult, simulate

# Public name -> defining module, loaded on first access (PEP 562): the engine imports torch,
# which ``pagedkv size`` must not wait for.
_EXPORTS: dict[str, str] = {
    "Engine": "pagedkv.entrypoints.engine",
    "EngineResult": "pagedkv.entrypoints.engine",
    "SimResult": "pagedkv.entrypoints.simulation",
    "simulate": "pagedkv.entrypoints.simulation",
}

__all__ = ["Engine", "EngineResult", "SimResult", "simulate"]


def __getattr__(name: str) -> Any:
    """Import a public name's submodule on first access and cache the name here."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the public names with those already loaded, for ``dir()`` and completion."""
    return sorted({*globals(), *__all__})
