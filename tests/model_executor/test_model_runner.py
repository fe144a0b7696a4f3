"""A real model served by the scheduler: token for token what Hugging Face's ``generate`` gives.

The workload is built to force every event a request can go through on the way: chunked
prefill (prompts longer than ``chunked_prefill_size``), prefix hits (a shared head, matched
once its first owner is in the radix cache), retraction (a pool too small for the admitted
requests' growth, admission made bold by a low ``schedule_conservativeness``) and the
re-prefill that recomputes a retracted request's KV. The lengths decide the schedule, not the
tokens, so the same events happen on any random model (``tests/managers/test_executor_interface``
shows them with a fake one). Triton's CPU interpreter runs the decode kernel.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (first: sets TRITON_INTERPRET on a CPU)

pytest.importorskip("transformers")  # optional: only the real-model tests need it
from pagedkv.entrypoints.engine import Engine, PromptRequest
from pagedkv.model_executor.model_loader import random_model_config
from pagedkv.model_executor.model_runner import ModelRunner

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter
MAX_NEW = 12
MIN_GAP = 1e-3  # greedy tokens are a fair check only if no step of the reference is a near tie
KV_TOL = 1e-5 if DEVICE == "cpu" else 1e-4  # fp32; GPU matmuls sum in a batch-dependent order


def prompts(n: int, seed: int, shared: int, vocab: int = 128) -> list[list[int]]:
    """``n`` prompts: the same ``shared`` head, then 3-19 tokens of their own."""
    rng = np.random.default_rng(seed)
    head = rng.integers(0, vocab, shared).tolist()
    return [head + rng.integers(0, vocab, int(rng.integers(3, 20))).tolist() for _ in range(n)]


def hf_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """``n`` greedy tokens from transformers' own ``generate`` (no stop token), after checking
    that no step is a near tie."""
    ids = torch.tensor([prompt], device=model.device)
    res = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=n, min_new_tokens=n, pad_token_id=0, eos_token_id=None,
                         return_dict_in_generate=True, output_logits=True)
    top2 = torch.cat(res.logits).float().topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min().item() > MIN_GAP
    return res.sequences[0, len(prompt):].tolist()


def tree_paths(tree) -> list[tuple[np.ndarray, np.ndarray]]:
    """(tokens, slots) of the path from the root to every leaf of the radix tree."""
    out = []
    for node in tree.nodes():
        if node is tree.root_node or not node.is_leaf():
            continue
        keys, cur = [], node
        while cur is not tree.root_node:
            keys.append(cur.key)
            cur = cur.parent
        out.append((np.concatenate(keys[::-1]), tree.path_indices(node)))
    return out


def check_cached_kv(runner: ModelRunner, tree) -> int:
    """Every cached prefix's K/V in the pool equal a fresh prefill of its tokens by
    transformers (the direct check that reusing them is valid); returns tokens checked."""
    pool, checked = runner.token_to_kv_pool, 0
    for tokens, slots in tree_paths(tree):
        out = runner.model(torch.tensor([tokens.tolist()], device=runner.device), use_cache=True)
        idx = torch.as_tensor(slots, device=runner.device)
        for layer_id, layer in enumerate(out.cache.layers):
            want_k, want_v = layer.keys[0].transpose(0, 1), layer.values[0].transpose(0, 1)
            torch.testing.assert_close(pool.get_key_buffer(layer_id)[idx], want_k, atol=KV_TOL,
                                       rtol=KV_TOL)
            torch.testing.assert_close(pool.get_value_buffer(layer_id)[idx], want_v, atol=KV_TOL,
                                       rtol=KV_TOL)
        checked += len(tokens)
    return checked


@pytest.fixture(scope="module")
def served() -> tuple[Engine, list[list[int]], object, dict[str, int]]:
    """One run of the forcing workload, every invariant and every cached prefix checked
    after every step."""
    runner = ModelRunner.load(random_model_config(), device=DEVICE, dtype="float32",
                              max_total_tokens=128, page_size=4, eos_token_ids=())
    assert runner.attention_backend == "triton"
    engine = Engine(runner, chunked_prefill_size=16, schedule_conservativeness=0.05)
    ps = prompts(6, seed=1, shared=8)
    sched = engine.scheduler([PromptRequest(len(p), MAX_NEW, tuple(p)) for p in ps])
    kv_checked = 0
    while sched.step():
        sched.check_invariants()
        kv_checked += check_cached_kv(runner, sched.tree_cache)
    counts = Counter(e.kind for e in sched.trace.events)
    stats = {"chunk": counts["chunk"], "retract": counts["retract"],
             "reprefill": counts["reprefill"],
             "cached_tokens": sum(r.cached_tokens for r in sched.reqs),
             "cached_after_retract": sum(r.cached_tokens for r in sched.reqs if r.num_retractions),
             "decode_steps": sched.counters.num_decode_steps, "kv_tokens_checked": kv_checked}
    print("events forced:", stats)
    return engine, ps, sched, stats


def test_every_event_is_forced(served) -> None:
    *_, stats = served
    assert stats["chunk"] > 0 and stats["retract"] > 0 and stats["reprefill"] > 0
    assert stats["cached_tokens"] > 0 and stats["cached_after_retract"] > 0
    assert stats["kv_tokens_checked"] > 0


def test_tokens_equal_transformers_generate(served) -> None:
    engine, ps, sched, _ = served
    model = engine.executor.model
    for req, prompt in zip(sched.reqs, ps, strict=True):
        assert req.finished and req.finish_reason == "length"
        assert req.output_ids == hf_greedy(model, prompt, MAX_NEW), (req.rid, req.num_retractions)


@pytest.mark.parametrize(("arch", "backend"), [("llama", "triton"), ("qwen2", "torch_native"),
                                             ("qwen3", "torch_native"), ("mistral", "torch_native")])
def test_architectures_page_size_1(arch: str, backend: str) -> None:
    """Qwen2's q/k/v biases, Qwen3's per-head q/k norms, Mistral's layout; pages of 1; the
    other architectures decode with the kernel's torch reference (the interpreter is slow)."""
    runner = ModelRunner.load(random_model_config(arch), device=DEVICE, dtype="float32",
                              max_total_tokens=256, eos_token_ids=(), attention_backend=backend)
    ps = prompts(3, seed=2, shared=6)
    res = Engine(runner).generate(ps, 6, check=True)
    assert res.outputs == [hf_greedy(runner.model, p, 6) for p in ps]


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_eos_ends_a_request_as_generate_does(disable_overlap_schedule: bool) -> None:
    """Both loops; in the overlap loop the request that samples EOS has already been given
    its next decode step, whose token is dropped."""
    runner = ModelRunner.load(random_model_config(), device=DEVICE, dtype="float32",
                              max_total_tokens=128, eos_token_ids=(), attention_backend="torch_native")
    ps = prompts(2, seed=3, shared=0)
    free = hf_greedy(runner.model, ps[0], 8)
    runner.eos_token_ids = (free[3],)  # request 0's fourth token ends it
    res = Engine(runner, disable_overlap_schedule=disable_overlap_schedule).generate(ps, 8)
    assert res.outputs[0] == free[:free.index(free[3]) + 1]
    assert res.requests[0].finish_reason == "stop"
    ids = torch.tensor([ps[1]])
    want = runner.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=8, pad_token_id=0, eos_token_id=free[3])
    assert res.outputs[1] == want[0, len(ps[1]):].tolist()


@pytest.mark.parametrize("page_size", [1, 4])
def test_overlap_loop_tokens_equal_transformers_generate(page_size: int) -> None:
    """The overlap loop on a real model (the in-flight token handed over as the decode
    input, prefills merged before their first token is known, retraction of requests whose
    pass is in flight, chunked prefill, shared prefixes): every request's tokens are
    transformers' greedy ``generate``."""
    runner = ModelRunner.load(random_model_config(), device=DEVICE, dtype="float32",
                              max_total_tokens=128, page_size=page_size, eos_token_ids=(),
                              attention_backend="torch_native")
    engine = Engine(runner, chunked_prefill_size=16, schedule_conservativeness=0.05,
                    disable_overlap_schedule=False)
    ps = prompts(6, seed=1, shared=8)
    sched = engine.scheduler([PromptRequest(len(p), MAX_NEW, tuple(p)) for p in ps])
    assert sched.overlap
    while sched.step():
        sched.check_invariants()
    counts = Counter(e.kind for e in sched.trace.events)
    assert counts["chunk"] > 0 and (counts["retract"] > 0 or page_size == 1)  # pages of 4 retract
    for req, prompt in zip(sched.reqs, ps, strict=True):
        assert req.finished and req.finish_reason == "length"
        assert req.output_ids == hf_greedy(runner.model, prompt, MAX_NEW), req.rid
