"""The front door, as SGLang's ``srt/entrypoints/``: what a user calls, above the scheduler.

Modules: ``engine`` (:class:`Engine`: one scheduler over a real model or the simulated
executor, and the one loop that steps it; ``engine_outcome``: :class:`EngineResult`, the
caps a run lowered and its wall-clock latencies), ``simulation`` (``simulated_engine``: an
``Engine`` with the simulated executor on the pool SGLang would build for a model on a GPU
preset; ``simulate``: a run on it), ``long_run`` (a long run with progress and Ctrl-C),
``sweep``, ``sweep_run`` and ``sweep_plot`` (a grid of runs, in parallel), and the one
``pagedkv`` command, ``cli``, with its subcommands: ``size`` (in ``cli``), ``simulate``
(``cli_simulate``, ``cli_simulate_workload``, ``cli_simulate_run``, ``cli_simulate_output``)
and ``generate`` (``cli_generate``, ``cli_generate_output``). Nothing under
``pagedkv.managers`` imports from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagedkv.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from pagedkv.entrypoints.engine import Engine
    from pagedkv.entrypoints.engine_outcome import EngineResult
    from pagedkv.entrypoints.simulation import simulate, simulated_engine

# Public name -> defining module, loaded on first access (PEP 562): the engine imports torch,
# which ``pagedkv size`` must not wait for.
_EXPORTS: dict[str, str] = {
    "Engine": "pagedkv.entrypoints.engine",
    "EngineResult": "pagedkv.entrypoints.engine_outcome",
    "simulate": "pagedkv.entrypoints.simulation",
    "simulated_engine": "pagedkv.entrypoints.simulation",
}

__all__ = ["Engine", "EngineResult", "simulate", "simulated_engine"]


# Loaded on first access and cached in this module (see pagedkv.lazy_exports).
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)
