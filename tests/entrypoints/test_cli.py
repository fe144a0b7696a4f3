"""``pagedkv size``: plain and JSON output, and bad input exiting 2 without a traceback."""

import json
import subprocess
import sys

import pytest

from pagedkv.entrypoints.cli import main
from pagedkv.sizing_checks import SWA_HYBRIDS

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


H100_8B = ["size", "--model", "llama-3-8b", "--gpu", "h100-sxm-80gb"]
WHOLE_CARD = ("warning: free memory taken as the whole card (H100 SXM 80GB: 79.65 GiB) before "
              "loading; a real server measures it after the CUDA context and communication "
              "buffers have taken theirs, so its pool comes out about 1-2 % smaller than this "
              "one; give the two 'avail mem' readings of its start-up log (--free-before-gib, "
              "--free-after-gib) for the exact pool")


def run_size_cli(capsys, argv):
    """``main`` in this process: (exit status, stdout, stderr)."""
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("extra", "message"), [
    (["--chunked-prefill-size", "0"], "pagedkv size: error: chunked_prefill_size=0 is invalid; "
     "valid: -1 (chunked prefill off) or an integer >= 1 (tokens per chunk)\n"),
    (["--chunked-prefill-size", "-5"], "chunked_prefill_size=-5 is invalid; valid: -1 "),
    (["--free-before-gib", "78.81", "--free-after-gib", "63.72", "--weights-gib", "30"],
     "pagedkv size: error: --weights-gib=30.0 cannot be used with --free-before-gib and "
     "--free-after-gib: the readings' difference is the weights as loaded; give one or the "
     "other\n"),
    (["--context-len", "1000000000"],
     "pagedkv size: error: context_len=1000000000 is invalid; valid: an integer from 1 to 8192, "
     "the model's derived context length (SGLang: User-specified context_length (1000000000) "
     "is greater than the derived context_length (8192). This may lead to incorrect model "
     "outputs or CUDA errors. Note that the derived context_length may differ from "
     "max_position_embeddings in the model's config. To allow overriding this maximum, set "
     "the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)\n"),
    (["--page-size", "1000000000"],
     "pagedkv size: error: Not enough memory. Please try to increase --mem-fraction-static. "
     "The cause here is the page size, not the fraction: page_size=1000000000 is larger than "
     "the pool, whose room for 419,019 tokens rounds down to zero pages of 1,000,000,000 "
     "tokens (SGLang itself stops before sizing: chunked_prefill_size=8192 is no multiple of "
     "it, and its argument check says 'chunked_prefill_size must be divisible by page_size'); "
     "valid: a page size of at most 419,019 tokens, or more memory for the pool\n"),
    (["--weights-gib", "79.43"],
     "pagedkv size: error: Loaded weights leave no GPU memory for the KV cache under "
     "--mem-fraction-static=0.83. Raise --mem-fraction-static: mem_fraction_static=0.83 keeps "
     "66.11 GiB for weights + KV, but the weights alone take 79.43 GiB, so f must exceed "
     "0.9973 (1 - available/pre), at or above SGLang's default for this card (0.83), which "
     "keeps the rest for activations and CUDA graphs: no practical f fits; use a larger GPU, "
     "more tensor parallelism or a quantized checkpoint\n"),
])
def test_size_refuses_with_one_line(capsys, monkeypatch, extra, message):
    """Findings of a first use: each refusal is one line, with the parameter and the way out."""
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    argv = [*H100_8B, *extra]
    if "--free-before-gib" in extra:
        argv = ["size", "--model", "llama-3-8b", *extra, "--mem-fraction-static", "0.88"]
    code, out, err = run_size_cli(capsys, argv)
    assert code == 2 and out == ""
    assert err.startswith("pagedkv size: error: ") and err.count("\n") == 1
    assert message in err


def test_page_larger_than_an_l4_pool_names_the_page(capsys):
    code, _, err = run_size_cli(capsys, ["size", "--model", "llama-3.1-8b", "--gpu", "l4",
                                         "--page-size", "3510"])
    assert code == 2
    assert ("page_size=3510 is larger than the pool, whose room for 3,509 tokens rounds down to "
            "zero pages of 3,510 tokens (SGLang itself stops before sizing: "
            "chunked_prefill_size=4096 is no multiple of it") in err
    code, _, err = run_size_cli(capsys, ["size", "--model", "llama-3.1-8b", "--gpu", "l4",
                                         "--page-size", "4096", "--chunked-prefill-size", "-1",
                                         "--mem-fraction-static", "0.684"])  # L4's default
    assert code == 2 and "rounds down to zero pages of 4,096 tokens; valid:" in err
    code, _, err = run_size_cli(capsys, ["size", "--model", "llama-3.1-8b", "--gpu", "l4",
                                         "--chunked-prefill-size", "-1"])
    assert code == 2 and err == (
        "pagedkv size: error: SGLang's default mem_fraction_static for L4 24GB with "
        "chunked_prefill_size=-1 is -0.099: its reserve for the activations of a prefill of "
        "max_prefill_tokens=16384 with chunking off and for CUDA graphs takes the whole card; "
        "valid: a mem_fraction_static in (0, 1], or a smaller chunked_prefill_size (the card's "
        "default leaves room)\n")
    code, _, err = run_size_cli(capsys, ["size", "--model", "qwen3-4b", "--gpu", "rtx-4090",
                                         "--chunked-prefill-size", "20000"])
    assert code == 2 and "the activations of a prefill chunk of 20,000 tokens" in err


def test_no_gpu_needs_a_fraction(capsys):
    code, _, err = run_size_cli(capsys, ["size", "--model", "llama-3.1-8b", "--free-before-gib",
                                         "78.81", "--free-after-gib", "63.72"])
    assert code == 2
    assert err == ("pagedkv size: error: --mem-fraction-static is required when no --gpu is "
                   "given (SGLang's default comes from the GPU's total memory); valid: a "
                   "fraction in (0, 1], or add --gpu\n")


def test_a_users_chunk_is_printed_and_sets_the_default_fraction(capsys):
    """SGLang's reserve reads the user's chunk (-1: 16,384 max_prefill_tokens and no prefill
    graphs in 0.5.23): H100 f = round((81,559 - (512 + 1.5 * 16,384 + 128 + 2 * 256)) /
    81,559, 3) = 0.685, not the card default's 0.83."""
    code, out, _ = run_size_cli(capsys, [*H100_8B, "--chunked-prefill-size", "-1", "--json"])
    assert code == 0 and json.loads(out)["mem_fraction_static"] == 0.685
    code, out, _ = run_size_cli(capsys, [*H100_8B, "--chunked-prefill-size", "-1"])
    assert ("max_total_num_tokens=324411, chunked_prefill_size=-1, max_prefill_tokens=16384, "
            "max_running_requests=4096, context_len=8192") in out
    code, out, _ = run_size_cli(capsys, [*L1, "--chunked-prefill-size", "2048"])
    assert "chunked_prefill_size=2048, max_prefill_tokens=16384" in out


def test_longer_context_with_sglangs_env_var_warns(capsys, monkeypatch):
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    code, out, _ = run_size_cli(capsys, [*H100_8B, "--context-len", "1000000000", "--json"])
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert warnings[0] == (
        "User-specified context_length (1000000000) is greater than the derived "
        "context_length (8192). This may lead to incorrect model outputs or CUDA errors. Note "
        "that the derived context_length may differ from max_position_embeddings in the "
        "model's config.")
    assert warnings[-1].startswith("B_max=0: the pool of 419,019 tokens cannot hold one "
                                   "request of the full 1,000,000,000-token context")
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "maybe")
    code, _, err = run_size_cli(capsys, [*H100_8B, "--context-len", "9000"])
    assert code == 2 and ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN='maybe' is invalid; valid: "
                          "true, 1, yes, y or false, 0, no, n") in err


def test_capacity_warnings_are_printed_and_in_the_json(capsys):
    code, out, _ = run_size_cli(capsys, ["size", "--model", "llama-3.1-8b", "--gpu", "l4"])
    assert code == 0
    assert ("B_max at 131,072 tokens of context: 0 (requests that fit at once if each grows to "
            "the full context)") in out
    assert ("warning: B_max=0: the pool of 3,509 tokens cannot hold one request of the full "
            "131,072-token context; the longest prompt SGLang accepts here is 3,502 tokens (and "
            "prompt plus output must fit in the pool); give the pool more memory or a shorter "
            "context (--context-len)") in out
    code, out, _ = run_size_cli(capsys, H100_8B)
    assert out.endswith(WHOLE_CARD + "\n")
    code, out, _ = run_size_cli(capsys, [*H100_8B, "--json"])
    assert json.loads(out)["warnings"] == [WHOLE_CARD.removeprefix("warning: ")]
    code, out, _ = run_size_cli(capsys, [*L1, "--json"])  # readings: no estimate to warn of
    assert json.loads(out)["warnings"] == []


def test_hybrid_flags_on_a_dense_model_warn(capsys):
    code, out, _ = run_size_cli(capsys, [
        *H100_8B, "--swa-full-tokens-ratio", "0.5", "--max-mamba-cache-size", "3",
        "--enable-multimodal", "--disable-hybrid-swa-memory", "--mamba-full-memory-ratio", "0.5"])
    assert code == 0
    ignored = [line for line in out.splitlines() if "does not apply" in line]
    assert ignored == [
        f"warning: {flag} does not apply to llama-3-8b: it only changes {kind}; ignored, as "
        "SGLang ignores it"
        for flag, kind in (("--disable-hybrid-swa-memory", SWA_HYBRIDS),
                           ("--swa-full-tokens-ratio", SWA_HYBRIDS),
                           ("--mamba-full-memory-ratio", "linear-attention hybrids"),
                           ("--max-mamba-cache-size", "linear-attention hybrids"),
                           ("--enable-multimodal", "models with a vision encoder"))]
    for flag in (["--swa-full-tokens-ratio", "0.5"], ["--disable-hybrid-swa-memory"]):
        code, out, _ = run_size_cli(capsys, ["size", "--model", "gpt-oss-20b", "--gpu",
                                             "h100-sxm-80gb", *flag])
        assert code == 0 and "does not apply" not in out


def test_help_groups_and_defines_b_max(capsys):
    with pytest.raises(SystemExit):
        main(["size", "--help"])
    out = capsys.readouterr().out
    limits, hybrid = out.index("server limits (every model):"), out.index("pools of hybrid")
    assert limits < out.index("  --max-running-requests") < out.index("  --chunked-prefill-size") < hybrid
    assert "B_max: how many requests fit in the pool at once" in " ".join(out.split())


def test_version_and_a_subcommands_unknown_flag(capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"pagedkv {importlib.metadata.version('pagedkv')}\n"
    with pytest.raises(SystemExit) as exit_:
        main([*H100_8B, "--bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: pagedkv size ")
    assert err.endswith("pagedkv size: error: unrecognized arguments: --bogus\n")


@pytest.mark.parametrize(("version", "load_end"), [
    ("0.5.9", "Load weight end. type=Qwen3ForCausalLM, dtype=torch.float16, avail mem="),
    ("0.5.23", "Load weight end. type=Qwen3ForCausalLM, avail mem="),
])
def test_a_t4_loads_bf16_models_as_float16(capsys, version, load_end):
    """SGLang below sm80 (both releases: maybe_downgrade_dtype_for_legacy_gpu / load_model)."""
    code, out, _ = run_size_cli(capsys, ["size", "--model", "qwen3-4b", "--gpu", "t4",
                                         "--sglang-version", version])
    lines = out.splitlines()
    assert code == 0
    assert lines[1] == "Compute capability below sm80. Use float16 due to lack of bfloat16 support."
    assert lines[2].startswith(load_end)
    if version == "0.5.23":  # the KV dtype is SGLang's "auto": the model's
        assert lines[3].startswith("KV Cache is allocated. dtype: torch.float16, ")
    code, out, _ = run_size_cli(capsys, ["size", "--model", "qwen3-4b", "--gpu", "l4"])
    assert "float16 due to" not in out and "dtype: torch.bfloat16" in out
