"""A regular (non-editable) install, as Colab does it, ships every module and data file."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_holds_every_module_and_data_file(tmp_path):
    # Build from a copy: setuptools writes build/ and *.egg-info/ into the source tree.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "node_modules", "_build", "build", "test-artifacts", "*.egg-info",
        "__pycache__"))  # .venv*: the reference venvs, built beside the tests by scripts/test.sh
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(source)], check=True, capture_output=True)
    names = set(zipfile.ZipFile(next(tmp_path.glob("pagedkv-*.whl"))).namelist())
    expected = {f"pagedkv/{p.relative_to(ROOT / 'pagedkv').as_posix()}"
                for p in (ROOT / "pagedkv").rglob("*") if p.suffix in {".py", ".json", ".jsonl", ".csv"}}
    expected |= {f"pagedkv_widgets/{p.relative_to(ROOT / 'widgets').as_posix()}"
                 for p in (ROOT / "widgets").rglob("*") if p.suffix in {".py", ".js", ".css"}}
    missing = sorted(expected - names)
    assert not missing, f"missing from the wheel: {missing}"


def test_test_modules_have_unique_names() -> None:
    """pytest imports the test folders without packages, by basename: two test modules with
    one name stop the whole run at collection (tests/reference included)."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in (Path(__file__).parent).rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []


def test_readme_presets_and_running_case_pools_are_pagedkvs() -> None:
    """README's GPU preset list is every preset, and its running-case pools are computed ones."""
    import re
    from pathlib import Path

    from pagedkv.gpus import GPU_PRESETS
    from pagedkv.sizing import plan_pool
    from pagedkv.workloads.cases import LONG_ANSWERS

    text = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    listed = re.search(r"GPU presets: (.*?)\. Memory", text).group(1)
    assert set(re.findall(r"`([a-z0-9-]+)`", listed)) == set(GPU_PRESETS)
    case = LONG_ANSWERS.plan().max_total_num_tokens
    default = plan_pool(LONG_ANSWERS.model, gpu=LONG_ANSWERS.gpu).max_total_num_tokens
    assert f"mem_fraction_static {LONG_ANSWERS.mem_fraction_static:.2f}, an {case:,}-token pool" in text
    assert f"{LONG_ANSWERS.sglang_default():.3f}, leaves # {default:,} tokens" in text
