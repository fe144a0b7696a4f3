"""A random Llama decodes through pagedkv's pools, allocator and kernel, token for token."""

from __future__ import annotations

import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (first: sets TRITON_INTERPRET on a CPU)
from pagedkv.errors import ConfigError, OutOfMemoryError

transformers = pytest.importorskip("transformers")  # optional: only this file needs it
from pagedkv.lessons.kernel.paged_llama import PagedLlamaRunner  # noqa: E402  (needs transformers)

pytestmark = pytest.mark.slow  # runs a Hugging Face model through the interpreted kernel

MAX_NEW_TOKENS = 17  # the prefill picks the first, then 16 decode steps
LOGIT_TOL = 1e-4  # fp32: max |pagedkv - transformers| over every step's logits
PROMPT_LENS = (5, 12, 23)  # different lengths, none a multiple of 16
Expected = tuple[list[int], list[int], torch.Tensor]  # prompt, greedy tokens, logits


@pytest.fixture(scope="module")
def model() -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=32, max_position_embeddings=128, initializer_range=0.2)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter
    return transformers.LlamaForCausalLM(config).eval().to(device)


@pytest.fixture(scope="module")
def expected(model: transformers.LlamaForCausalLM) -> list[Expected]:
    """(prompt, greedy tokens, logits [steps, vocab]) from transformers' own generate."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for n in PROMPT_LENS:
        prompt = torch.randint(0, 256, (1, n), generator=gen).to(model.device)
        res = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS,
                             return_dict_in_generate=True, output_logits=True,
                             pad_token_id=0, eos_token_id=None)
        tokens = res.sequences[0, n:].tolist()
        logits = torch.cat(res.logits).float().cpu()
        top2 = logits.topk(2, dim=-1).values
        # Greedy tokens are a fair check only if no step is a near tie.
        assert (top2[:, 0] - top2[:, 1]).min().item() > 10 * LOGIT_TOL
        out.append((prompt[0].tolist(), tokens, logits))
    return out


@pytest.mark.parametrize("page_size", [1, 16])
def test_greedy_decode_matches_transformers(
    model: transformers.LlamaForCausalLM, expected: list[Expected], page_size: int
) -> None:
    runner = PagedLlamaRunner(model, page_size=page_size, max_total_tokens=256, max_num_reqs=4,
                              max_context_len=64)
    free_before = runner.allocator.available_size()
    with torch.no_grad():
        rows, logits = runner.prefill([prompt for prompt, _, _ in expected])
        runner.check_invariants()
        steps = [logits]
        for _ in range(MAX_NEW_TOKENS - 1):  # 16 decode steps through the Triton kernel
            steps.append(runner.decode(rows, steps[-1].argmax(dim=-1)))
            runner.check_invariants()
    all_logits = torch.stack(steps, dim=1).cpu()
    for i, (_, want_tokens, want_logits) in enumerate(expected):
        assert all_logits[i].argmax(dim=-1).tolist() == want_tokens
        assert (all_logits[i] - want_logits).abs().max().item() <= LOGIT_TOL
    runner.release(rows)
    runner.check_invariants()
    assert runner.allocator.available_size() == free_before  # everything freed


def test_generate_frees_everything(
    model: transformers.LlamaForCausalLM, expected: list[Expected]
) -> None:
    runner = PagedLlamaRunner(model, page_size=4, max_total_tokens=64, max_num_reqs=2,
                              max_context_len=32)
    tokens, logits = runner.generate([expected[0][0]], 3)
    assert tokens == [expected[0][1][:3]] and logits.shape == (1, 3, 256)
    assert runner.allocator.available_size() == 64 and not runner.seq_lens
    runner.check_invariants()


def test_runner_errors(model: transformers.LlamaForCausalLM) -> None:
    runner = PagedLlamaRunner(model, page_size=16, max_total_tokens=32, max_num_reqs=2,
                              max_context_len=40)
    with pytest.raises(ConfigError, match=r"max_total_tokens=40 is invalid; valid: a multiple"):
        PagedLlamaRunner(model, page_size=16, max_total_tokens=40)
    with pytest.raises(ConfigError, match=r"prompts=\[\] is invalid; valid: a non-empty list"):
        runner.prefill([])
    with pytest.raises(ConfigError, match=r"len\(prompts\[0\]\)=41 is invalid"):
        runner.prefill([[1] * 41])
    with pytest.raises(OutOfMemoryError):
        runner.prefill([[1] * 20, [2] * 20])  # 4 pages asked, 2 in the pool
    assert runner.allocator.available_size() == 32  # all-or-nothing
    with pytest.raises(ConfigError, match=r"rows=1 is invalid; valid: a live request row"):
        runner.decode([1], torch.tensor([3]))
