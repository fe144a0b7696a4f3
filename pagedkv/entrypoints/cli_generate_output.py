"""What ``pagedkv generate`` shows: a progress bar while it decodes, then each output as ids
and text, or one JSON object.

The bar (tqdm, on stderr, on a terminal only) counts output tokens against the sum of the
granted caps, so its rate is tokens per second, and names the decode steps taken; requests
that stop at EOS end it early. Per request the JSON carries the ids, the decoded text when
the model has a tokenizer, the cap asked and granted, and wall-clock TTFT, TPOT and
end-to-end seconds (:class:`~pagedkv.entrypoints.engine_outcome.RequestTiming`).
"""

from __future__ import annotations

import json
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

if TYPE_CHECKING:
    from pagedkv.entrypoints.engine import EngineResult
    from pagedkv.managers.scheduler import Scheduler


class DecodeProgress:
    """A tqdm bar over output tokens; :meth:`update` is an ``on_step`` callback.

    ``disable``: None shows it on a terminal only (tqdm's rule), True never.
    """

    def __init__(self, disable: bool | None = None) -> None:
        self.disable = disable
        self.bar: tqdm | None = None

    def update(self, sched: Scheduler) -> None:
        """Move the bar to the tokens generated so far; name the decode steps."""
        if self.bar is None:
            total = sum(r.max_new_tokens for r in sched.reqs)
            self.bar = tqdm(total=total, unit="tok", desc="decode", file=sys.stderr,
                            disable=self.disable, dynamic_ncols=True)
        done = sum(r.generated for r in sched.reqs)
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix_str(f"{sched.counters.num_decode_steps} steps, "
                                 f"{sched.num_finished}/{len(sched.reqs)} done", refresh=False)

    def __enter__(self) -> DecodeProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.close()


def result_rows(res: EngineResult) -> list[dict[str, Any]]:
    """One JSON-ready row per request, in submission order."""
    texts = res.texts
    granted = {c.rid: c for c in res.clamps}
    rows = []
    for r in res.requests:
        clamp = granted.get(r.rid)
        timing = res.timings[r.rid].to_dict() if res.timings else {}
        rows.append({"rid": r.rid, "prompt_len": r.prompt_len, "output_len": r.generated,
                     "finish_reason": r.finish_reason, "retractions": r.num_retractions,
                     "cached_tokens": r.cached_tokens,
                     "max_new_tokens": clamp.asked if clamp else r.max_new_tokens,
                     "max_new_tokens_granted": r.max_new_tokens, **timing,
                     "output_ids": list(r.output_ids or []),
                     **({"text": texts[r.rid]} if texts is not None else {})})
    return rows


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


def print_result(res: EngineResult, as_json: bool, with_log: bool) -> None:
    """Print the run: JSON (``as_json``), or a summary line and one line per request (ids,
    then the text when there is a tokenizer); SGLang's log lines first with ``with_log``."""
    rows = result_rows(res)
    if as_json:
        out = {"meta": res.trace.meta.to_dict(), "metrics": res.metrics.as_dict(),
               "clamps": [c.to_dict() for c in res.clamps], "outputs": rows,
               **({"log": res.log} if with_log else {})}
        print(json.dumps(out, indent=2))
        return
    if with_log:
        print("\n".join(res.log))
    meta = res.trace.meta
    print(f"{meta.model} on {meta.gpu}: pool {meta.max_total_num_tokens:,} tokens (page_size "
          f"{meta.page_size}), SGLang {meta.sglang_version} scheduler ({meta.loop}), radix cache "
          f"{'on' if meta.radix_cache else 'off'}; {len(rows)} requests, "
          f"{res.metrics.output_tokens} tokens in {res.metrics.duration_s:.2f} s of forward passes")
    for row in rows:
        print(f"[{row['rid']}] {row['prompt_len']} prompt + {row['output_len']} output tokens "
              f"({row['finish_reason']}, {row['retractions']} retractions, {row['cached_tokens']} "
              f"cached; TTFT {_ms(row.get('ttft_s'))}, TPOT {_ms(row.get('tpot_s'))})")
        print(f"    ids:  {row['output_ids']}")
        if "text" in row:
            print(f"    text: {row['text']!r}")
