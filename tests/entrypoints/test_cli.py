"""``pagedkv size``: plain and JSON output, and bad input exiting 2 without a traceback."""

import json
import subprocess
import sys

import pytest

from pagedkv.entrypoints.cli import main

L1 = ["size", "--model", "llama-3.1-8b", "--free-before-gib", "78.81", "--free-after-gib", "63.72",
      "--mem-fraction-static", "0.88"]


def test_json_reproduces_log_l1(capsys):
    assert main([*L1, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes_per_token"] == 131_072
    assert abs(out["max_total_num_tokens"] - 444_500) <= 50
    assert round(out["k_size_gib"], 2) == round(out["v_size_gib"], 2) == 27.13
    assert out["max_running_requests"] == 2048  # the January 2025 log's 2049 had a padding row
    assert out["mem_fraction_static"] == 0.88


def test_plain_output_reads_like_sglang(capsys):
    assert main(["size", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb"]) == 0
    out = capsys.readouterr().out
    # SGLang 0.5.23's default f for an H100 is 0.830: (0.830 * 81,559 MiB - weights) / 128 KiB
    assert ("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 419019, K size: 25.57 GB, "
            "V size: 25.57 GB") in out
    assert "B_max at 8,192 tokens of context: 51" in out


def test_mla_json_has_kv_size(capsys):
    assert main(["size", "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "8",
                 "--weights-gib", "80", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes_per_token"] == 70_272 and "kv_size_gib" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope", "--gpu", "h100-sxm-80gb"], "model='nope' is invalid; valid: a preset"),
        (["--model", "llama-3-8b", "--gpu", "b300"], "gpu='b300' is invalid; valid: h100-sxm-80gb"),
        (["--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--mem-fraction-static", "1.5"],
         r"mem_fraction_static=1.5 is invalid; valid: a fraction in (0, 1]"),
        (["--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--page-size", "0"],
         "page_size=0 is invalid; valid: an integer >= 1"),
        (["--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--tp", "3"],
         "tp=3 is invalid; valid: a divisor or a multiple of num_key_value_heads=8"),
        (["--model", "llama-3.1-70b", "--gpu", "h100-sxm-80gb"],
         "Not enough memory: weights take 131.42 GiB of 79.65 GiB free"),
        (["--model", "llama-3-8b", "--free-before-gib", "20", "--free-after-gib", "30",
          "--mem-fraction-static", "0.9"],
         "--free-after-gib=30.0 is invalid; valid: at most --free-before-gib=20.0"),
        (["--model", "llama-3-8b", "--free-before-gib", "20"], "go together"),
        (["--model", "qwen2.5-7b", "--gpu", "h100-sxm-80gb", "--tp", "8"],
         "tp=8 is invalid; valid: a divisor of num_attention_heads=28"),
        (["--model", "llama-3-8b", "--gpu", "l4", "--weights-gib", "-5"],
         "--weights-gib=-5.0 is invalid; valid: a finite number >= 0 GiB"),
        (["--model", "llama-3-8b", "--gpu", "l4", "--weights-gib", "nan"],
         "--weights-gib=nan is invalid; valid: a finite number >= 0 GiB"),
        (["--model", "llama-3-8b", "--gpu", "l4", "--weights-gib", "inf"],
         "--weights-gib=inf is invalid; valid: a finite number >= 0 GiB"),
        (["--model", "llama-3-8b", "--free-before-gib", "nan", "--free-after-gib", "30"],
         "--free-before-gib=nan is invalid; valid: a finite number > 0 GiB"),
        (["--model", "llama-3-8b", "--free-before-gib", "80", "--free-after-gib=-inf"],
         "--free-after-gib=-inf is invalid; valid: a finite number >= 0 GiB"),
        (["--model", "llama-3-8b", "--gpu", "l4", "--mem-fraction-static", "nan"],
         "mem_fraction_static=nan is invalid; valid: a fraction in (0, 1]"),
        (["--model", "/nonexistent/model", "--gpu", "l4"], "existing config.json file or folder"),
        (["--model", "llama-3-8b"], "give --gpu"),
    ],
)
def test_bad_input_exits_2_with_clear_message(args, message):
    proc = subprocess.run([sys.executable, "-m", "pagedkv", "size", *args],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_missing_fields_via_cli(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": 64}')
    proc = subprocess.run([sys.executable, "-m", "pagedkv", "size", "--model", str(tmp_path),
                           "--gpu", "l4"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "lacks required field" in proc.stderr and "Traceback" not in proc.stderr


def test_help_documents_units():
    proc = subprocess.run([sys.executable, "-m", "pagedkv", "size", "--help"],
                          capture_output=True, text=True, check=True)
    for flag in ("--free-before-gib", "--free-after-gib", "--mem-fraction-static", "--tp",
                 "--page-size", "--kv-cache-dtype", "--context-len", "--max-total-tokens",
                 "--weights-gib", "--json"):
        assert flag in proc.stdout
    assert "GiB" in proc.stdout and "tokens" in proc.stdout


def test_simulate_is_wired_into_the_main_command(capsys):
    assert main(["simulate", "--model", "qwen3-4b", "--gpu", "rtx-4090", "--num-requests", "20",
                 "--rate", "2", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["cell_size"] == 147_456
    assert out["metrics"]["num_requests"] == 20 and out["metrics"]["output_tokens"] > 0


@pytest.mark.parametrize("argv", [["size", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb"],
                                  ["size", "--help"]])
def test_size_starts_without_torch(argv):
    # torch takes about a second to import; only ``simulate`` needs it, and registering
    # that subcommand must not load it.
    code = (f"import sys, pagedkv.entrypoints.cli\ntry:\n"
            f"    pagedkv.entrypoints.cli.main({argv!r})\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'pagedkv size imported torch'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "KV Cache is allocated" in proc.stdout or "--kv-cache-dtype" in proc.stdout


def test_size_follows_the_chosen_release(capsys):
    assert main(["size", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb",
                 "--sglang-version", "0.5.9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mem_fraction_static"] == 0.835 and out["max_total_num_tokens"] == 422_282
    assert main(["size", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mem_fraction_static"] == 0.830


def test_simulate_runs_the_overlap_loop_unless_disabled(capsys):
    """SGLang's default loop unless ``--disable-overlap-schedule``; the summary and the JSON
    ``meta`` say which ran, and the runs differ (the overlap loop sees a finish a step late)."""
    argv = ["simulate", "--quiet", "--model", "qwen3-4b", "--gpu", "rtx-4090", "--num-requests",
            "20", "--rate", "2", "--seed", "1"]
    runs, text = {}, {}
    for disable, flag in ((False, []), (True, ["--disable-overlap-schedule"])):
        assert main([*argv, *flag, "--json"]) == 0
        runs[disable] = json.loads(capsys.readouterr().out)
        assert main([*argv, *flag]) == 0
        text[disable] = capsys.readouterr().out.splitlines()[0]
        assert runs[disable]["meta"]["disable_overlap_schedule"] is disable
        assert runs[disable]["summary"]["completed"] == 20
    assert "SGLang 0.5.23 scheduler (overlap loop), radix cache on" in text[False]
    assert "(normal loop, --disable-overlap-schedule)" in text[True]
    assert runs[False]["metrics"]["num_steps"] != runs[True]["metrics"]["num_steps"]


def test_overlap_schedule_sweeps_on_and_off(capsys):
    argv = ["simulate", "--quiet", "--model", "qwen3-4b", "--gpu", "rtx-4090", "--num-requests",
            "20", "--rate", "2", "--seed", "1", "--json"]
    assert main([*argv, "--workers", "1", "--sweep", "disable_overlap_schedule=off,on"]) == 0
    sweep = json.loads(capsys.readouterr().out)["sweep"]
    assert [r["meta"]["disable_overlap_schedule"] for r in sweep] == [False, True]
    for row in sweep:
        flag = ["--disable-overlap-schedule"] if row["meta"]["disable_overlap_schedule"] else []
        assert main([*argv, *flag]) == 0
        assert json.loads(capsys.readouterr().out)["summary"] == row["summary"]
    assert main([*argv, "--sweep", "disable_overlap_schedule=maybe"]) == 2
    assert ("--sweep disable_overlap_schedule='maybe' is invalid; valid: on, off"
            in capsys.readouterr().err)
