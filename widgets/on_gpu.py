"""The chapters' "On your GPU" sections: a :class:`pagedkv.lessons.on_gpu.Report` as Markdown
(on the CPU stand-in a warning first, then its sentences, its table, and SGLang's log lines as
a code block)."""

from __future__ import annotations

from IPython.display import Markdown

from pagedkv_widgets.tables import markdown_table


def report_md(report: object) -> Markdown:
    """Render ``report`` (``lines``, ``header``, ``rows``, ``log``) for a notebook cell."""
    note = getattr(report, "cpu_note", "")
    parts = ([f"> {note}"] if note else []) + list(report.lines)  # type: ignore[attr-defined]
    if report.header:  # type: ignore[attr-defined]
        parts.append(markdown_table(report.header, report.rows).data)  # type: ignore[attr-defined]
    if report.log:  # type: ignore[attr-defined]
        # on the CPU stand-in the lines' seconds and throughputs are the tiny model's on this CPU
        cpu = getattr(report.setup, "kind", "") == "tiny"  # type: ignore[attr-defined]
        label = ("SGLang's log lines from this run (CPU-run: any time or throughput in them is the "
                 "tiny model's on this CPU, not a GPU's):" if cpu else
                 "SGLang's log lines from this run:")
        parts.append(f"{label}\n\n```text\n"
                     + "\n".join(report.log) + "\n```")  # type: ignore[attr-defined]
    return Markdown("\n\n".join(parts))
