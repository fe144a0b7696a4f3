"""``pagedkv simulate --sweep NAME=V1,V2,...``: the same requests under several settings.

Each ``--sweep`` names one axis; several axes give every combination (the first axis
varies slowest). Axes: :data:`AXES`. Each setting sizes its own pool and runs the whole
workload; one table shows them side by side, and ``--plot FILE.html`` draws the same
numbers (:mod:`pagedkv.entrypoints.sweep_plot`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from pagedkv.entrypoints.long_run import RunOutcome
from pagedkv.errors import bad_value, check_positive_int, check_real

_ON = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def _flag(name: str, text: str) -> bool:
    if text.lower() not in _ON:
        raise bad_value(f"--sweep {name}", text, "on, off, true, false, 1 or 0")
    return _ON[text.lower()]


def _int(name: str, text: str) -> int:
    try:
        return check_positive_int(f"--sweep {name}", int(text))
    except ValueError:
        raise bad_value(f"--sweep {name}", text, "an integer >= 1") from None


def _chunk(name: str, text: str) -> int:
    """A prefill chunk in tokens, or SGLang's -1: chunking off."""
    return -1 if text.strip() == "-1" else _int(name, text)


def _real(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise bad_value(f"--sweep {name}", text, "a number") from None
    return check_real(f"--sweep {name}", value, 0.0, open_low=True)


AXES: dict[str, Callable[[str, str], object]] = {
    "mem_fraction_static": _real,
    "page_size": _int,
    "radix_cache": _flag,
    "policy": lambda name, text: text,
    "sglang_version": lambda name, text: text,
    "max_total_tokens": _int,
    "schedule_conservativeness": _real,
    "chunked_prefill_size": _chunk,
    "disable_overlap_schedule": _flag,
}
"""Axis name -> parser of one value (ranges are checked again where the value is used:
``mem_fraction_static`` in (0, 1], a known ``policy`` and ``sglang_version``)."""


@dataclass(frozen=True)
class Axis:
    """One ``--sweep`` flag: a parameter and its values, in order."""

    name: str
    values: tuple[object, ...]


def parse_axis(spec: str) -> Axis:
    """``"page_size=1,16,64"`` -> ``Axis("page_size", (1, 16, 64))``.

    Raises:
        ConfigError: no ``=``, an unknown name, no values or a bad value.
    """
    name, sep, rest = spec.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in AXES:
        raise bad_value("--sweep", spec, f"NAME=V1,V2,... with NAME one of {', '.join(AXES)}")
    texts = [t.strip() for t in rest.split(",")]
    if not all(texts):  # "1,,2" or "1,": a value left out by mistake, not one to skip
        raise bad_value(f"--sweep {name}", rest, "one or more values separated by commas, "
                        "none empty")
    values = tuple(AXES[name](name, t) for t in texts)
    if len(set(values)) < len(values):  # the same setting twice: a wasted run, a doubled row
        raise bad_value(f"--sweep {name}", rest, "each value at most once")
    return Axis(name, values)


def settings(axes: list[Axis]) -> list[dict[str, object]]:
    """Every combination of the axes' values, as ``{name: value}``."""
    names = [a.name for a in axes]
    if len(set(names)) < len(names):
        raise bad_value("--sweep", ",".join(names), "each parameter at most once")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(a.values for a in axes))]


def label(setting: dict[str, object]) -> str:
    """``page_size=16 radix_cache=off``."""
    def show(v: object) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)
    return " ".join(f"{k}={show(v)}" for k, v in setting.items())


def sweep_row(setting: dict[str, object], run: RunOutcome) -> dict[str, Any]:
    """The numbers the table and the plot show for one setting (times in seconds)."""
    s = run.table.summary()
    return {"setting": label(setting), "pool_tokens": run.engine.plan.max_total_num_tokens,
            "retractions": s["num_retractions"], "recomputed_tokens": s["recomputed_tokens"],
            "output_throughput": s["output_throughput"],
            "request_throughput": s["request_throughput"],
            "p50_ttft_s": s["p50_ttft_s"], "p99_ttft_s": s["p99_ttft_s"],
            "p50_tpot_s": s["p50_tpot_s"], "p99_e2e_s": s["p99_e2e_s"],
            "prefix_hit_rate": s["prefix_hit_rate"], "completed": s["completed"],
            "cut_outputs": len(run.cut), "interrupted": run.interrupted}


HEADERS = (("setting", "setting", "{}"), ("pool_tokens", "pool tokens", "{:,}"),
           ("retractions", "retractions", "{:,}"), ("output_throughput", "out tok/s", "{:,.0f}"),
           ("request_throughput", "req/s", "{:,.2f}"), ("p50_ttft_s", "TTFT p50 ms", "ms"),
           ("p99_ttft_s", "TTFT p99 ms", "ms"), ("p50_tpot_s", "TPOT p50 ms", "ms"),
           ("prefix_hit_rate", "prefix hit", "{:.1%}"))


def print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    """The side-by-side table, one line per setting."""
    def cell(key: str, fmt: str, row: dict[str, Any]) -> str:
        v = row[key]
        if v is None:
            return "-"
        text = f"{1000 * v:,.2f}" if fmt == "ms" else fmt.format(v)
        return text + (" (partial)" if key == "setting" and row["interrupted"] else "")
    table = [[h for _, h, _ in HEADERS]] + [[cell(k, f, r) for k, _, f in HEADERS] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    for line in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))), file=out)
