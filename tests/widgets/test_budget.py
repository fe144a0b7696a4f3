"""The chapter-1 budget explorer's table: every cell is plan_pool's answer."""

from pagedkv.configs.model_presets import load_model
from pagedkv.gpus import get_gpu
from pagedkv.sizing import plan_pool
from pagedkv.units import GiB
from pagedkv_widgets.budget import budget_explorer, budget_table


def test_table_rows_match_plan_pool():
    table = budget_table(["llama-3-8b"], ["h100-sxm-80gb"], [0.85], [8192])
    weights, reserve, pool, tokens, cap = table["llama-3-8b|h100-sxm-80gb|0.850|8192"]
    plan = plan_pool(load_model("llama-3-8b"), gpu=get_gpu("h100-sxm-80gb"), mem_fraction_static=0.85)
    assert tokens == plan.max_total_num_tokens and cap == plan.batch_cap == 52
    assert round(weights + reserve + pool, 1) == round(get_gpu("h100-sxm-80gb").memory_bytes / GiB, 1)


def test_weights_that_do_not_fit_give_none():
    table = budget_table(["gemma-2-9b"], ["l4"], [0.5], [8192])
    assert table["gemma-2-9b|l4|0.500|8192"] is None


def test_explorer_html_carries_its_data_and_renderer(monkeypatch):
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "1")
    html = budget_explorer(models=["qwen3-4b"], gpus=["rtx-4090"], fractions=[0.8, 0.9],
                           contexts=[4096], initial=("qwen3-4b", "rtx-4090", 0.8, 4096)).data
    assert '"qwen3-4b|rtx-4090|0.900|4096"' in html
    assert "function pagedkvBudget" in html
    assert "Plotly.newPlot" not in html and len(html) < 50_000  # plotly.js comes from the page


def test_contexts_beyond_the_model_are_marked():
    table = budget_table(["llama-3-8b"], ["h100-sxm-80gb"], [0.835], [8192, 32768])
    assert table["llama-3-8b|h100-sxm-80gb|0.835|32768"] == "context"
    assert table["llama-3-8b|h100-sxm-80gb|0.835|8192"][3] == 422_282  # chapter 1's default pool


def test_explorer_shows_names_not_preset_ids(monkeypatch):
    import json
    import re

    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "1")
    html = budget_explorer().data
    spec = json.loads(re.search(r'<script type="application/json"[^>]*>(.*?)</script>', html).group(1))
    assert spec["labels"]["h100-sxm-80gb"] == "H100 SXM 80GB"
    assert spec["labels"]["llama-3-8b"] == "Llama-3-8B"
    assert set(spec["labels"]) == set(spec["models"]) | set(spec["gpus"])
    assert "<figcaption>" in html


def test_explorer_opens_on_the_followed_releases_default(monkeypatch):
    """The slider opens at SGLang 0.5.23's default for the H100 (0.830, the value chapter 1's
    text computes) and stops at 0.5.9's too (0.835)."""
    import json
    import re

    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "1")
    html = budget_explorer().data
    spec = json.loads(re.search(r'<script type="application/json"[^>]*>(.*?)</script>', html).group(1))
    assert spec["initial"][2] == "0.830"
    assert {"0.830", "0.835"} <= set(spec["fractions"]) and spec["fractions"] == sorted(spec["fractions"])
    assert spec["table"]["llama-3-8b|h100-sxm-80gb|0.830|8192"][3] == 419_019
