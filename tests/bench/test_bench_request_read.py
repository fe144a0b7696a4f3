"""bench/bench_request_read.py: both readers run in their own process and agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_request_read.py"


def test_small_run_reports_both_readers(tmp_path: Path) -> None:
    out = tmp_path / "read.json"
    subprocess.run([sys.executable, str(SCRIPT), "--requests", "300", "--rate", "5", "--repeat", "1",
                    "--out", str(out)], check=True, capture_output=True, text=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["requests"] == 300 and report["same_columns"] is True
    for reader in ("whole_text", "line_by_line"):
        r = report["results"][reader]
        assert len(r["cpu_s"]) == 1 and r["cpu_s"][0] > 0 and r["peak_bytes"][0] > 0
