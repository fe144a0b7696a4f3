"""``Engine``: one trace format for both executors, SGLang's pool sizing on the real path,
and bad input refused before any work."""

from __future__ import annotations

from itertools import chain, repeat

import numpy as np
import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (first: sets TRITON_INTERPRET on a CPU)

pytest.importorskip("transformers")
from pagedkv.entrypoints.engine import Engine
from pagedkv.errors import ConfigError
from pagedkv.model_executor.model_loader import random_model_config, resolve_dtype
from pagedkv.model_executor.model_runner import ModelRunner
from pagedkv.model_executor.sim_executor import SimExecutor
from pagedkv.sizing import profile_max_num_token
from pagedkv.units import GiB, MiB
from pagedkv.workloads.synthetic import RequestSpec

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner.load(random_model_config(), device="cpu", max_total_tokens=64, page_size=4,
                            eos_token_ids=(), attention_backend="torch_native")


def _types(value: object) -> object:
    """The shape of a JSON value: dict keys with their value types, list element types."""
    if isinstance(value, dict):
        return {k: _types(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return sorted({repr(_types(v)) for v in value})
    return type(value).__name__


def test_a_real_trace_has_the_simulators_keys_and_types(runner: ModelRunner) -> None:
    real = Engine(runner, record_pages=True).generate([[1, 2, 3, 4, 5], [6, 7, 8]], 5).trace.to_dict()
    specs = [RequestSpec(5, 5, 5), RequestSpec(3, 5, 5)]
    sim = Engine(SimExecutor(), max_total_num_tokens=64, page_size=4,
                 record_pages=True).run(specs).trace.to_dict()
    assert real.keys() == sim.keys()
    for block in ("meta", "steps", "page_events"):  # page events: what the visualizer replays
        assert _types(real[block]) == _types(sim[block]), block
    assert _types(real["events"]) == _types(sim["events"])
    assert _types(real["log"]) == _types(sim["log"])
    assert real["meta"]["model"] == "random llama" and real["meta"]["gpu"] == "cpu"
    assert real["meta"]["cell_size"] == 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 heads of 16, fp32


def test_pool_sized_from_two_free_memory_readings() -> None:
    """The GPU path on the CPU: readings before and after loading, SGLang's formula."""
    pre, post, total = 64 * MiB, 63 * MiB, 16 * GiB  # 1 MiB of "weights" on a 16 GiB card
    readings = chain([(pre, total)], repeat((post, total)))
    runner = ModelRunner.load(random_model_config(), device="cpu", page_size=16,
                              mem_fraction_static=0.5, mem_get_info=lambda: next(readings),
                              eos_token_ids=())
    cell = 2 * 2 * 2 * 16 * 4
    tokens = profile_max_num_token(pre, post, cell, 0.5) // 16 * 16  # (63 - 32) MiB / 512 B
    assert runner.max_total_num_tokens == tokens == 63_488
    k, v = runner.token_to_kv_pool.kv_size_bytes()
    assert k + v == (tokens + 16) * cell == runner.plan.k_size_bytes + runner.plan.v_size_bytes
    assert runner.startup_log[0] == "Load weight begin. avail mem=0.06 GB"
    engine = Engine(runner)
    # a 16 GiB card is in SGLang's smallest class: chunks of 2048, CUDA graphs up to 8
    assert engine.config.chunked_prefill_size == 2048 and engine.config.cuda_graph_max_bs == 8
    assert engine.config.max_running_requests == runner.plan.max_running_requests
    assert engine.scheduler([]).trace.meta.gpu_memory_bytes == total


def test_dtypes_by_device() -> None:
    cuda = torch.device("cuda")
    assert resolve_dtype(None, CPU) == torch.float32
    assert resolve_dtype(None, cuda, capability=(7, 5)) == torch.float16  # T4
    assert resolve_dtype(None, cuda, capability=(9, 0)) == torch.bfloat16  # H100
    with pytest.raises(ConfigError, match=r"dtype='bfloat16' is invalid; valid: float16, float32 "
                                          r"on cuda \(compute capability 7.5\)"):
        resolve_dtype("bf16", cuda, capability=(7, 5))
    with pytest.raises(ConfigError, match=r"dtype='float16' is invalid; valid: float32 on the CPU"):
        ModelRunner.load(random_model_config(), device="cpu", dtype="fp16", max_total_tokens=64)
    with pytest.raises(ConfigError, match=r"dtype='fp8' is invalid"):
        resolve_dtype("fp8", CPU)


def test_the_decode_backend_follows_where_triton_runs() -> None:
    from pagedkv.layers.attention.checks import interpreted
    from pagedkv.model_executor.model_runner import _backend

    here, other = (CPU, torch.device("cuda")) if interpreted() else (torch.device("cuda"), CPU)
    assert _backend(None, here) == "triton" and _backend(None, other) == "torch_native"
    with pytest.raises(ConfigError, match=r"attention_backend='triton' is invalid; valid: "
                                          r"torch_native for a model on"):
        _backend("triton", other)


def test_bad_models_and_sizes() -> None:
    import transformers

    gpt2 = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    with pytest.raises(ConfigError, match=r"model='gpt2' is invalid; valid: .*llama, mistral, "
                                          r"qwen2, qwen3"):
        ModelRunner.load(gpt2, device="cpu", max_total_tokens=64)
    with pytest.raises(ConfigError, match=r"max_total_tokens=None is invalid; valid: a token count"):
        ModelRunner.load(random_model_config(), device="cpu")
    with pytest.raises(ConfigError, match=r"attention_backend='flash' is invalid"):
        ModelRunner.load(random_model_config(), device="cpu", max_total_tokens=64,
                         attention_backend="flash")
    with pytest.raises(ConfigError, match=r"arch='gemma' is invalid"):
        random_model_config("gemma")


def test_bad_prompts_fail_before_any_work(runner: ModelRunner, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(runner, "forward", lambda batch: calls.append(batch))
    engine = Engine(runner)
    with pytest.raises(ConfigError, match=r"len\(prompts\[0\]\)=70 is invalid; valid: < "
                       r"max_req_input_len=58 .*; max_total_tokens >= 80 \(the pool is the "
                       r"size given\)"):  # 70 + 7 tokens, in pages of 4
        engine.generate([[1] * 70], 4)  # longer than the 64-token pool
    with pytest.raises(ConfigError, match=r"len\(prompts\[1\]\)=600 is invalid; valid: < "
                                          r"context_len=512"):
        engine.generate([[1], [2] * 600], 4)
    with pytest.raises(ConfigError, match=r"prompts\[0\] token id=128 is invalid; valid: an id in "
                                          r"\[0, 128\)"):
        engine.generate([[1, 128]], 4)
    with pytest.raises(ConfigError, match=r"prompts\[0\]='hello' is invalid; valid: token ids"):
        engine.generate(["hello"], 4)
    with pytest.raises(ConfigError, match=r"prompts\[0\]=\[\] is invalid"):
        engine.generate([[]], 4)
    with pytest.raises(ConfigError, match=r"max_new_tokens\[0\]=0 is invalid"):
        engine.generate([[1, 2]], 0)
    with pytest.raises(ConfigError, match=r"executor='SimExecutor' is invalid; valid: a ModelRunner"):
        Engine(SimExecutor(), max_total_num_tokens=64).generate([[1]], 2)
    with pytest.raises(ConfigError, match=r"page_size=1 is invalid; valid: 4 \(the ModelRunner's pool\)"):
        Engine(runner, page_size=1)
    assert not calls


def test_sliding_window_longer_than_served() -> None:
    runner = ModelRunner.load(random_model_config("mistral", sliding_window=16), device="cpu",
                              max_total_tokens=64, attention_backend="torch_native")
    with pytest.raises(ConfigError, match=r"max_new_tokens=20 is invalid; valid: <= sliding_window=16"):
        Engine(runner).generate([list(range(10))], 10)


def test_simulated_engine_matches_the_scheduler() -> None:
    specs = [RequestSpec(int(n), 8, 8) for n in np.arange(3, 9)]
    res = Engine(SimExecutor(), max_total_num_tokens=64, page_size=4).run(specs, check=True)
    assert res.outputs == [[]] * 6 and res.texts is None
    assert res.clamps == [] and res.timings == []  # simulated: the trace has its times
    assert res.metrics.output_tokens == 48 and len(res.trace.events_of("finish")) == 6


def _gpu_runner(fraction: float, context: int) -> ModelRunner:
    """The GPU sizing path on the CPU: 1 MiB of weights read off a 16 GiB card."""
    readings = chain([(64 * MiB, 16 * GiB)], repeat((63 * MiB, 16 * GiB)))
    return ModelRunner.load(random_model_config(max_position_embeddings=context), device="cpu",
                            page_size=16, mem_fraction_static=fraction, eos_token_ids=(),
                            mem_get_info=lambda: next(readings))


def test_a_long_prompt_hears_what_would_take_it() -> None:
    # (63 MiB - 64 MiB * 0.98) / 512 B = 573 tokens, 560 in pages of 16
    runner = _gpu_runner(0.02, 4096)
    assert runner.max_total_num_tokens == 560 and not runner.pool_capped
    with pytest.raises(ConfigError, match=r"len\(prompts\[0\]\)=600 is invalid; valid: < "
                       r"max_req_input_len=554 .*; a pool of >= 608 tokens: a higher "
                       r"mem_fraction_static than 0.02 or a GPU with more free memory"):
        Engine(runner).generate([[1] * 600], 4)
    # the same pool under a 512-token context: the context is the limit, not the pool
    with pytest.raises(ConfigError, match=r"len\(prompts\[0\]\)=508 is invalid; valid: < "
                       r"max_req_input_len=506 .*; a shorter prompt \(context_len=512 bounds it"):
        Engine(_gpu_runner(0.02, 512)).generate([[1] * 508], 2)


def test_settings_checked_at_the_api() -> None:
    for bad in (0, 1.5, float("nan"), float("inf"), -0.1):
        with pytest.raises(ConfigError, match=r"mem_fraction_static=.* is invalid; valid: a "
                                              r"fraction in \(0, 1\]"):
            ModelRunner.load(random_model_config(), device="cpu", max_total_tokens=64,
                             mem_fraction_static=bad)
    with pytest.raises(ConfigError, match=r"max_total_tokens=15 is invalid; valid: at least "
                                          r"page_size=16: the pool holds whole pages, and 15 "
                                          r"tokens round down to 0 pages of 16"):
        ModelRunner.load(random_model_config(), device="cpu", max_total_tokens=15, page_size=16)
    runner = ModelRunner.load(random_model_config(), device="cpu", max_total_tokens=40,
                              page_size=16, mem_fraction_static=0.9)
    assert runner.max_total_num_tokens == 32 and runner.pool_capped
    assert runner.notes == ["mem_fraction_static=0.9 is ignored on cpu: no free memory is "
                            "measured there, the pool is max_total_tokens=40"]


class _Letters:
    """A stand-in tokenizer: token t is the letter chr(97 + t % 26)."""

    def __call__(self, text: str) -> object:
        return type("Enc", (), {"input_ids": [ord(c) - 97 for c in text]})()

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(97 + t % 26) for t in ids)


def test_from_pretrained_options_progress_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    from pagedkv.entrypoints.cli_generate_output import DecodeProgress, print_result

    engine = Engine.from_pretrained(random_model_config(), device="cpu", max_total_tokens=64,
                                    tokenizer=_Letters(), chunked_prefill_size=4,
                                    max_running_requests=2, schedule_conservativeness=2.0)
    cfg = engine.config
    assert (cfg.chunked_prefill_size, cfg.max_running_requests, cfg.schedule_conservativeness) \
        == (4, 2, 2.0)
    with DecodeProgress(disable=False) as bar:
        res = engine.generate(["abcdef", "xyz"], 3, ignore_eos=True, on_step=bar.update)
    assert bar.bar is not None and bar.bar.n == bar.bar.total == 6
    assert "decode: 100%" in capsys.readouterr().err  # tqdm's line, tok/s beside it
    assert len(res.trace.events_of("chunk")) >= 1  # the 6-token prompt went in chunks of 4
    print_result(res, as_json=False, with_log=False)
    out = capsys.readouterr().out
    for ids, text in zip(res.outputs, res.texts, strict=True):
        assert f"    ids:  {ids}\n    text: {text!r}" in out
    assert res.clamps == [] and len(res.timings) == 2
