"""The chapters' "On your GPU" sections on the CPU stand-in (the book runs all of them; these
are the quick ones)."""

from __future__ import annotations

import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (first: sets TRITON_INTERPRET on a CPU)

pytest.importorskip("transformers")
from pagedkv.lessons.on_gpu import Report, detect_setup, plural, size
from pagedkv.lessons.on_gpu_memory import CPU_POOL_CAP, real_pool
from pagedkv_widgets.on_gpu import report_md


def test_the_cpu_runs_the_tiny_model_and_says_so() -> None:
    setup = detect_setup(device="cpu")
    assert setup.kind == "tiny" and setup.dtype == torch.float32 and not setup.on_gpu
    assert "No GPU here" in setup.describe()


def test_real_pool_on_the_cpu_stand_in() -> None:
    report = real_pool(detect_setup(device="cpu"))
    values = {row[0]: row[2] for row in report.rows}
    assert values["cell size"] == "512 B"  # 2 x 2 layers x 2 heads x 16 x 4 B
    assert values["max_total_num_tokens"] == f"{CPU_POOL_CAP:,}"
    assert report.log[2].startswith(f"KV Cache is allocated. dtype: torch.float32, #tokens: {CPU_POOL_CAP},")
    text = report_md(report).data
    assert "pretend" in text and "| quantity | how | value |" in text and "```text" in text
    # chapter 1's section only sizes the pool: its sentence promises no decode kernel, no times
    assert "nothing is served" in text and "interpreter" not in text and "times" not in text


def test_helpers() -> None:
    assert [size(n) for n in (512, 8192, 3 * 2**20, 2**31)] == [
        "512 B", "8.00 KiB", "3.00 MiB", "2.00 GiB"]
    assert plural(1, "request") == "1 request" and plural(2, "time") == "2 times"
    assert report_md(Report(detect_setup(device="cpu"), ["a"])).data == "a"


def test_admission_table_adds_up_to_the_pool() -> None:
    """Chapter 4's table: used + free + cached (evictable) is the pool at every row shown."""
    from pagedkv.lessons.on_gpu_serving import admission

    report = admission(detect_setup(device="cpu"))
    col = {name: k for k, name in enumerate(report.header)}
    sums = {sum(int(row[col[c]].replace(",", "")) for c in ("tokens used", "free",
                                                            "cached (evictable)"))
            for row in report.rows}
    assert sums == {80}  # the CPU stand-in's pool
    # an idle row still showing the decayed ratio says why (the reset comes a pass later)
    from pagedkv.managers.config import SchedulerConfig

    init = f"{SchedulerConfig().init_ratio:.3f}"
    stale = [r for r in report.rows if r[col["kind"]] == "idle" and r[col["ratio"]] != init]
    assert ("A step marked idle" in " ".join(report.lines)) == bool(stale)


def test_retraction_report_counts_agree() -> None:
    """Chapter 5's table: what a victim held, what the tree kept, what its re-prefill computed
    (all its chunks, not the first) and the recomputed part of it."""
    from pagedkv.lessons.on_gpu_serving import retraction

    report = retraction(detect_setup(device="cpu"))
    col = {name: k for k, name in enumerate(report.header)}
    assert report.rows
    for row in report.rows:
        held, kept = row[col["KV held when retracted"]], row[col["of it kept in the tree"]]
        again, recomputed = row[col["prefilled again"]], row[col["of it recomputed KV"]]
        assert kept <= held and recomputed <= held
        assert again == recomputed + row[col["retractions"]]
        # the recomputed KV is what the tree no longer held when the victim came back, which
        # eviction may have cut below what it kept at the retraction
        still = row[col["of that still in the tree when admitted again"]]
        assert still <= kept and recomputed == held - still
    assert "freeing" not in " ".join(report.lines) and "their KV; when" not in " ".join(report.lines)
    # the newest token is prefilled once per re-prefill: the words follow the run's count
    reprefills = sum(row[col["retractions"]] for row in report.rows)
    text = " ".join(report.lines)
    assert "each time" not in text
    assert ("at the one re-prefill" in text) == (reprefills == 1)
    assert (f"at each of the {reprefills} re-prefills" in text) == (reprefills != 1)


def test_a_gpu_without_the_hub_falls_back_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline and not cached: random weights in the real shapes, without asking transformers
    (which would retry the network for about 50 s)."""
    import transformers

    from pagedkv.lessons import on_gpu
    from pagedkv.model_executor import hub

    monkeypatch.setattr(hub, "_PROBES", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(on_gpu, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(on_gpu, "resolve_dtype", lambda dtype, device: torch.float16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", pytest.fail)
    setup = detect_setup("org/not-downloaded")
    assert setup.kind == "random-full" and setup.device_name == "Tesla T4"
    assert "the hub was not reachable" in setup.describe()


def test_prefix_cache_report_finds_the_shared_prompt() -> None:
    """Chapter 8's section: the requests that arrive after the first find its prompt in the
    tree (the overlap loop would cache it only after launching their pass: none found)."""
    from pagedkv.lessons.on_gpu_serving import prefix_cache

    report = prefix_cache(detect_setup(device="cpu"))
    col = {name: k for k, name in enumerate(report.header)}
    found = {row[col["radix cache"]]: int(row[col["tokens from the cache"]].replace(",", ""))
             for row in report.rows}
    assert found["off"] == 0 and found["on"] == 5 * 96  # the 5 that follow the first
