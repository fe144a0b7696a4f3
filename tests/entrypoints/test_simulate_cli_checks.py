"""What ``pagedkv simulate`` says about its input: a request cut short at arrival, the file
line of a refused request, flags that contradict each other or an output path, and the
Python API's own checks (each found by a first use of the command line alone)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from pagedkv.entrypoints.cli_simulate import MAX_NUM_REQUESTS, run_simulate
from pagedkv.errors import ConfigError
from tests.entrypoints.test_simulate_cli import parse

LONG_OUTPUTS = '{"prompt_len": 4000, "output_len": 3000}\n' * 2  # more than a 5,000-token pool holds
POOL = ("--model", "qwen3-4b", "--gpu", "rtx-4090", "--max-total-tokens", "5000")


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_outputs_cut_at_arrival_are_said_in_text_and_json(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """max_req_len = min(context_len - 1, 5000 - 1) = 4999 leaves 4999 - 4000 - 1 = 998
    tokens of output: both requests end by length at 998, and the report says so."""
    requests = _file(tmp_path, "long.jsonl", LONG_OUTPUTS)
    assert run_simulate(parse("--requests-file", requests, *POOL)) == 0
    out = capsys.readouterr().out
    assert "note: 2 requests asked for more output than the pool or the context" in out
    assert ("note: request 0 (line 1): its 3000-token output cut to 998 tokens (max_req_len = "
            "min(context_len - 1, max_total_num_tokens - 1) = 4999 (set by "
            "max_total_num_tokens) leaves 998 after the 4000-token prompt") in out
    assert run_simulate(parse("--requests-file", requests, *POOL, "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cut_outputs"]["count"] == 2
    assert report["cut_outputs"]["first"][1] == {
        "rid": 1, "output_len": 3000, "granted": 998, "line": 2,
        "why": report["cut_outputs"]["first"][0]["why"]}
    assert [r["output_len"] for r in report["requests"]] == [998, 998]
    assert {r["finish_reason"] for r in report["requests"]} == {"length"}
    assert report["meta"]["core"] == "reference"


def test_a_run_that_cuts_nothing_says_nothing(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    requests = _file(tmp_path, "short.jsonl", '{"prompt_len": 100, "output_len": 30}\n')
    assert run_simulate(parse("--requests-file", requests, *POOL)) == 0
    out = capsys.readouterr().out
    assert "cut short" not in out and "1 request from" in out  # one request, not "1 requests"
    assert run_simulate(parse("--requests-file", requests, *POOL, "--json")) == 0
    assert json.loads(capsys.readouterr().out)["cut_outputs"] == {"count": 0, "first": []}


def test_a_refused_request_is_named_by_its_file_line(tmp_path: Path) -> None:
    """The scheduler counts requests from 0; a CSV's first request is on line 2."""
    requests = _file(tmp_path, "r.csv", "prompt_len,output_len\n10,5\n4995,5\n")
    with pytest.raises(ConfigError, match=(
            rf"^request 1 \(line 3 of {requests}\) prompt_len=4995 is invalid; valid: "
            r"< max_req_input_len=4994 .*the pool set it: a larger pool")):
        run_simulate(parse("--requests-file", requests, *POOL))


def test_a_refused_run_leaves_no_csv_behind(tmp_path: Path) -> None:
    requests = _file(tmp_path, "r.csv", "prompt_len,output_len\n4995,5\n")
    table = tmp_path / "out.csv"
    with pytest.raises(ConfigError, match=r"^request 0 \(line 2 of "):
        run_simulate(parse("--requests-file", requests, *POOL, "--csv", str(table)))
    assert not table.exists()


def test_a_prompt_past_the_context_says_the_context_set_the_bound(tmp_path: Path) -> None:
    """Prompt plus output fit the 512-token context (the file's check), but SGLang's
    max_req_input_len = min(512 - 1, pool - 1) - 5 = 506 refuses a 507-token prompt."""
    requests = _file(tmp_path, "r.jsonl", '{"prompt_len": 507, "output_len": 5}\n')
    with pytest.raises(ConfigError, match=r"max_req_input_len=506 .*the model's context set it"):
        run_simulate(parse("--requests-file", requests, "--context-len", "512"))


@pytest.mark.parametrize(("argv", "message"), [
    (("--csv", "-"), "--csv='-' is invalid; valid: a file path"),
    (("--csv", "{tmp}/no/such/folder/x.csv"), "a path in an existing folder"),
    (("--csv", "{tmp}"), "a file path, not a folder"),
    (("--requests-file", "{requests}", "--csv", "{requests}"), "a path other than --requests-file"),
    (("--sweep", "page_size=1,16", "--plot", "{tmp}/no/such/folder/p.html"),
     "--plot=.* a path in an existing folder"),
    (("--sweep", "page_size=1,16", "--plot", "{tmp}/p.png"), "--plot=.* a file name ending in .html"),
    (("--requests-file", "{requests}", "--workload", "long"),
     "--workload='long' is invalid; valid: omitted with --requests-file"),
    (("--sweep", "page_size=1,16", "--page-size", "64"),
     r"--page-size=64 is invalid; valid: omitted with --sweep page_size=1,16 \(the sweep sets it\)"),
    (("--sweep", "radix_cache=on,off", "--disable-radix-cache"), "--disable-radix-cache=True"),
    (("--sweep", "page_size=1,1"), "--sweep page_size='1,1' is invalid; valid: each value at most once"),
    (("--num-requests", str(MAX_NUM_REQUESTS + 1)), "at most 100,000,000"),
    (("--sweep", "page_size=1,,16"), "--sweep page_size='1,,16' is invalid; valid: .* none empty"),
    (("--chunked-prefill-size", "0"),
     "--chunked-prefill-size=0 is invalid; valid: -1 \\(chunked prefill off\\) or an integer >= 1"),
    (("--chunked-prefill-size", "-5"), "--chunked-prefill-size=-5"),
    (("--context-len", "0"), "--context-len=0 is invalid"),
])
def test_contradicting_flags_and_unwritable_outputs_are_refused_before_any_run(
        tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    requests = _file(tmp_path, "r.csv", "prompt_len,output_len\n10,5\n")
    argv = tuple(a.format(tmp=tmp_path, requests=requests) for a in argv)
    with pytest.raises(ConfigError, match=message):
        run_simulate(parse(*argv))
    assert Path(requests).read_text() == "prompt_len,output_len\n10,5\n"  # never overwritten


def test_more_requests_asked_than_the_file_holds_is_a_note(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    requests = _file(tmp_path, "r.csv", "prompt_len,output_len\n10,5\n20,5\n")
    assert run_simulate(parse("--requests-file", requests, "--num-requests", "100")) == 0
    assert "note: --num-requests 100: the file holds 2 requests, and all of them run" in \
        capsys.readouterr().out


def test_kv_dtype_context_and_chunk_reach_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """fp8 KV halves bf16's bytes per token: the pool holds twice the tokens (to a token:
    the same bytes of room, page_size 1); the setting line says which dtype."""
    from pagedkv.sizing import plan_pool

    bf16 = plan_pool("qwen3-4b", gpu="rtx-4090").max_total_num_tokens
    fp8 = plan_pool("qwen3-4b", gpu="rtx-4090", kv_cache_dtype="fp8_e4m3").max_total_num_tokens
    assert fp8 in (2 * bf16, 2 * bf16 + 1)
    argv = ("--model", "qwen3-4b", "--gpu", "rtx-4090", "--num-requests", "20", "--workload", "fixed")
    # SGLang's default fraction reserves for the chunk it is given: the pool follows it
    chunked = plan_pool("qwen3-4b", gpu="rtx-4090", kv_cache_dtype="fp8_e4m3",
                        chunked_prefill_size=1024).max_total_num_tokens
    assert chunked != fp8
    assert run_simulate(parse(*argv, "--kv-cache-dtype", "fp8_e4m3", "--context-len", "4096",
                              "--chunked-prefill-size", "1024", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["meta"]["max_total_num_tokens"] == chunked
    # chunking off: the reserve for 16,384 prefill tokens takes the 24 GB card's default away
    with pytest.raises(ConfigError, match=r"chunked_prefill_size=-1 is -0\.03"):
        run_simulate(parse(*argv, "--chunked-prefill-size", "-1"))
    assert run_simulate(parse(*argv, "--chunked-prefill-size", "-1", "--mem-fraction-static",
                              "0.8")) == 0
    capsys.readouterr()
    assert run_simulate(parse(*argv, "--kv-cache-dtype", "fp8_e4m3")) == 0
    assert f"pool {fp8:,} tokens (page_size 1, mem_fraction_static 0.704, fp8_e4m3 KV)" in \
        capsys.readouterr().out


def test_a_chunk_sweep_takes_minus_one_as_chunking_off(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--num-requests", "20", "--workload", "fixed", "--workers", "1", "--quiet",
            "--sweep", "chunked_prefill_size=-1,256")
    assert run_simulate(parse(*argv)) == 0
    out = capsys.readouterr().out
    assert "chunked_prefill_size=-1" in out and "chunked_prefill_size=256" in out


def test_tensor_parallel_step_times_say_what_is_not_modelled(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_simulate(parse("--model", "llama-3.1-70b", "--tp", "4", "--num-requests", "10",
                              "--workload", "fixed")) == 0
    out = capsys.readouterr().out
    assert "one GPU of tp 4" in out
    assert "each of the 4 GPUs takes its share, with no communication between them modelled" in out


def test_python_simulate_runs_a_requests_file_and_names_a_bad_option(tmp_path: Path) -> None:
    import pagedkv
    from pagedkv.entrypoints.simulation import _ENGINE_OPTIONS, simulated_engine
    from pagedkv.workloads.request_files import load_requests

    text = "prompt_len,output_len,arrival_s\n100,20,0\n200,30,0.5\n"
    requests = load_requests(_file(tmp_path, "r.csv", text))
    res = pagedkv.simulate(requests, model="llama-3-8b", gpu="l4", mem_fraction_static=0.85)
    assert [r.arrival_s for r in res.requests] == [0.0, 0.5]
    assert [r.generated for r in res.requests] == [20, 30]
    with pytest.raises(ConfigError, match=r"option='rate' is invalid; .*sharegpt_like\(n, rate=R\)"):
        pagedkv.simulate(requests, rate=2)
    with pytest.raises(ConfigError, match=r"option='page_sise' is invalid; .*did you mean page_size\?"):
        pagedkv.simulate(requests, page_sise=16)
    # the names the message lists are simulated_engine's own keywords
    own = [p.name for p in inspect.signature(simulated_engine).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert list(_ENGINE_OPTIONS) == own


@pytest.mark.parametrize(("cached", "quiet", "said"), [(False, False, True), (True, False, False),
                                                      (None, False, False), (False, True, False)])
def test_a_first_compile_is_said_before_the_wait(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str],
                                                 cached: bool | None, quiet: bool, said: bool) -> None:
    """The first compiled run on a machine compiles for about a minute and a half: said on
    standard error first (not when the cache holds it, cannot be read, or with --quiet)."""
    import pagedkv.managers.compiled_core.runner as runner
    from pagedkv.entrypoints import long_run
    from pagedkv.entrypoints.simulation import simulated_engine
    from pagedkv.managers.trace_summary import SummaryTrace
    from pagedkv.workloads.synthetic import fixed

    monkeypatch.setattr(runner, "compiled_core_cached", lambda: cached)
    engine = simulated_engine()
    sched = engine.scheduler(fixed(4, 64, 8), trace=SummaryTrace(engine.meta))  # as a long run's
    long_run._say_if_compiling(sched, "compiled", quiet)
    assert ("compiling the compiled step core for this machine, once" in capsys.readouterr().err) is said


def test_wall_clock_arrivals_start_the_run_at_zero(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A trace stamped in Unix seconds replays like the same trace from 0: same duration and
    rates (they were divided by 55 years), and the report says by how much it moved."""
    rows = [(0.0, 100, 20), (0.5, 200, 30), (1.25, 50, 10)]
    runs = []
    for name, base in (("zero.csv", 0.0), ("epoch.csv", 1733212800.0)):
        text = "arrival_s,prompt_len,output_len\n" + "".join(f"{base + t},{p},{o}\n" for t, p, o in rows)
        assert run_simulate(parse("--requests-file", _file(tmp_path, name, text), "--json")) == 0
        runs.append(json.loads(capsys.readouterr().out))
    zero, epoch = runs
    assert epoch["summary"] == zero["summary"]
    assert [r["arrival_s"] for r in epoch["requests"]] == [0.0, 0.5, 1.25]
    assert epoch["workload"]["arrivals"] == ("the file's arrival_s, less the first one "
                                             "(1,733,212,800.000 s) so that the run starts at t=0")
    assert zero["workload"]["arrivals"] == "the file's arrival_s"


def test_the_report_names_the_setting_and_what_sglang_changed(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--num-requests", "10", "--workload", "fixed", "--gpu", "l4", "--model", "qwen3-4b")
    assert run_simulate(parse(*argv, "--max-running-requests", "100000", "--kv-cache-dtype",
                              "fp8_e4m3", "--json")) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    lowered = report["meta"]["max_running_requests"]
    assert lowered < 100000
    assert (f"warning: max_running_requests=100000 lowered to {lowered:,}, as SGLang sizes it "
            "from the pool") in captured.err
    assert {k: report["meta"][k] for k in ("kv_cache_dtype", "tp", "chunked_prefill_size")} == {
        "kv_cache_dtype": "fp8_e4m3", "tp": 1, "chunked_prefill_size": 4096}
    assert report["plan_notes"][0].startswith("free memory taken as the whole card (L4 24GB")
    assert run_simulate(parse(*argv)) == 0
    captured = capsys.readouterr()
    assert "note: the pool takes the whole card as free before loading" in captured.out
    assert captured.err == ""  # a plain run says nothing on stderr


def test_python_simulate_takes_a_path(tmp_path: Path) -> None:
    import pagedkv

    path = _file(tmp_path, "r.jsonl", '{"prompt_len": 100, "output_len": 20, "arrival_s": 7}\n')
    res = pagedkv.simulate(path, model="llama-3-8b", gpu="l4")
    assert [(r.arrival_s, r.generated) for r in res.requests] == [(0.0, 20)]
    assert pagedkv.simulate(Path(path)).metrics.num_requests == 1


def test_running_out_of_memory_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv.entrypoints import cli_simulate_workload
    from pagedkv.entrypoints.cli import main

    def too_many(args: object) -> None:
        raise MemoryError("Unable to allocate 745. GiB")

    monkeypatch.setattr(cli_simulate_workload, "build_workload", too_many)
    assert main(["simulate", "--num-requests", "1000"]) == 2
    err = capsys.readouterr().err
    assert err == ("pagedkv simulate: error: out of memory (a simulated run holds about 1 GiB per "
                   "million requests); run fewer requests, or split the trace\n")


def test_sharegpt_only_flags_with_another_file_are_a_note(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    requests = _file(tmp_path, "r.jsonl", '{"prompt_len": 10, "output_len": 5}\n')
    assert run_simulate(parse("--requests-file", requests, "--chars-per-token", "3",
                              "--sharegpt-turns", "first")) == 0
    out = capsys.readouterr().out
    assert ("note: --chars-per-token applies to ShareGPT files only: this jsonl file gives "
            "token counts; ignored") in out and "note: --sharegpt-turns applies" in out
    assert run_simulate(parse("--requests-file", requests)) == 0
    assert "applies to ShareGPT" not in capsys.readouterr().out
