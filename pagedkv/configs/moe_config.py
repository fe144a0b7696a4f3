"""A mixture of experts' routing as the step-time model reads it: experts per token and the
parameters one token runs through.

SGLang routes each token to ``num_experts_per_tok`` of a MoE layer's ``num_experts`` routed
experts (``layers/moe/topk.py``; the config names both, whatever the family calls the expert
count: ``num_local_experts`` for Mixtral and gpt-oss, ``num_experts`` for Qwen MoE,
``n_routed_experts`` for DeepSeek). The routed experts' parameter count comes from the
checkpoint's model on the meta device (:func:`pagedkv.weights.count_routed_expert_parameters`),
never from a per-architecture formula; shared experts run for every token and count with the
rest.
"""

from __future__ import annotations

from pagedkv.errors import ConfigError


def check_experts_per_tok(num_experts_per_tok: object, num_experts: int, name: str) -> int:
    """``num_experts_per_tok`` if it is an integer in ``1 .. num_experts``.

    Raises:
        ConfigError: it is missing (0), not an integer or out of that range.
    """
    k = num_experts_per_tok
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= num_experts:
        raise ConfigError(
            f"config of {name!r}: num_experts_per_tok={k!r} is invalid or missing; valid: an "
            f"integer in 1..{num_experts} (the routed experts each token runs through, out of "
            f"num_experts={num_experts})")
    return k


def active_params(num_params: int, routed_params: int, num_experts: int,
                  num_experts_per_tok: object, name: str = "custom") -> int:
    """Parameters one token runs through: every parameter but the routed experts', plus
    ``num_experts_per_tok / num_experts`` of those (rounded down). Embedding and output rows
    count in full, as for a dense model.

    Raises:
        ConfigError: ``num_experts_per_tok`` invalid (:func:`check_experts_per_tok`), or
            ``routed_params`` outside ``0 .. num_params``.
    """
    k = check_experts_per_tok(num_experts_per_tok, num_experts, name)
    if not 0 <= routed_params <= num_params:
        raise ConfigError(f"routed_params={routed_params!r} is invalid; valid: an integer in "
                          f"0..num_params={num_params}")
    return num_params - routed_params + routed_params * k // num_experts
