"""Chapter 8's examples and figures: the claims its prose makes, held by the numbers."""

from __future__ import annotations

import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.prefix_examples import (
    CHAT_POOL,
    SUPPORT_POOL,
    chat_runs,
    radix_story,
    support_bot_runs,
)
from pagedkv_widgets.radix_figures import pool_split_slider, radix_tree_slider
from pagedkv_widgets.tables import prefix_runs_table


@pytest.fixture(scope="module")
def chats():
    return chat_runs(page_sizes=(1, 16, 64))


@pytest.fixture(scope="module")
def bot():
    return support_bot_runs()


def test_story_splits_locks_and_evicts_as_the_chapter_says():
    story = radix_story()
    f = story.frames
    assert [len(x.nodes) - 1 for x in f] == [0, 1, 3, 5, 6, 6, 4, 4]
    assert f[2].caption.endswith("4 cached, 2 new")  # the first split, after "the cat sat on"
    assert (f[5].protected, f[5].evictable) == (6, 6)  # the locked path
    assert f[6].free - f[5].free == 3  # exactly the 3 slots asked for
    left = {" ".join(n.words) for n in f[6].nodes}
    assert {"the mat", "ran"}.isdisjoint(left) and {"a dog ran", "a hat"} <= left
    assert (f[7].protected, f[7].evictable) == (0, 9)
    match = story.tree.match_prefix(story.ids("the cat sat on a mat"))
    assert len(match.device_indices) == 5
    assert [" ".join(story.words(c.key)) for c in match.last_device_node.children.values()] \
        == ["hat"]
    story.tree.check_invariants()


def test_support_bot_first_burst_misses_then_everyone_hits(bot):
    cached, plain = bot[True], bot[False]
    n, computed, held = cached.first_prefill()
    trace = cached.scheduler.trace
    first = [e for e in trace.events_of("admit") if e.step == 0]
    assert n > 1 and all(e.extra["cached"] == 0 for e in first)
    # the pass is cut by the 8,192-token chunk budget: its last request is only chunked, the
    # others sample and are cached; all but the first of those free their 1,000-token copy
    cut = [e for e in trace.events_of("chunk") if e.step == 0]
    assert len(cut) == 1 and computed == cached.scheduler.config.chunked_prefill_size
    assert computed - held == 1000 * (n - len(cut) - 1)
    assert all(h == 1000 for h in cached.hit_lens[n:])
    assert cached.hit_rate > 0.5 and plain.reused_tokens == 0
    assert cached.peak_held * 3 < plain.peak_held <= SUPPORT_POOL
    assert cached.max_running_reqs > plain.max_running_reqs


def test_chat_service_hits_fall_with_page_size_and_the_tree_stays_full(chats, bot):
    rates = [chats[f"p = {p}"].hit_rate for p in (1, 16, 64)]
    assert rates[0] > rates[1] > rates[2] > 0.3
    assert chats["p = 1, cache disabled"].reused_tokens == 0
    end = chats["p = 1"].split
    assert end.own[-1] == end.protected[-1] == 0
    assert end.evictable[-1] > 0.9 * CHAT_POOL  # "token usage keeps growing after requests finish"
    assert chats["p = 1, cache disabled"].split.free[-1] == CHAT_POOL
    # the evictable band fills the pool mid-run and eviction keeps it there
    assert chats["p = 1"].evicted > 0
    chats["p = 1"].scheduler.check_memory()


def test_figures_have_one_slider_step_per_frame_and_run(chats):
    story = radix_story()
    fig = radix_tree_slider(story.frames, "t")
    steps = fig.layout.sliders[0].steps
    assert len(steps) == len(story.frames) and len(fig.data) == 2 * len(story.frames)
    assert [len(s.args[1]["annotations"]) for s in steps] == [len(f.nodes) for f in story.frames]
    assert sum(t.visible for t in fig.data) == 2
    pool = pool_split_slider(chats, "t")
    assert len(pool.data) == 4 * len(chats)
    assert [s.label for s in pool.layout.sliders[0].steps] == list(chats)
    with pytest.raises(ConfigError, match="frames"):
        radix_tree_slider([], "t")
    with pytest.raises(ConfigError, match="runs"):
        pool_split_slider({}, "t")
    with pytest.raises(ConfigError, match="sentence='zzz'"):
        story.unlock("zzz")
    table = prefix_runs_table(chats).data
    assert table.count("\n") == len(chats) + 1 and "p = 64" in table


def test_the_first_pass_keeps_its_chunked_chats_copy_until_the_next_pass(bot):
    """Chapter 8's first pass: the chats that finished their prompt leave one copy of the system
    prompt in the tree; the chunked chat's part of it stays its own (first_prefill_chunk) until
    the next pass puts the chunk into the tree, where it is freed as a duplicate."""
    from pagedkv.lessons.prefix_examples import SUPPORT_SYSTEM_LEN

    run = bot[True]
    admitted, computed, held = run.first_prefill()
    chunk = run.first_prefill_chunk()
    assert 0 < chunk < SUPPORT_SYSTEM_LEN  # the chunk ends inside the system prompt
    finished = admitted - 1
    own_questions = computed - chunk - finished * SUPPORT_SYSTEM_LEN
    assert held == SUPPORT_SYSTEM_LEN + own_questions + chunk
    assert computed - held == (finished - 1) * SUPPORT_SYSTEM_LEN
    assert int(run.split.own[0]) == chunk and int(run.split.own[1]) < chunk
