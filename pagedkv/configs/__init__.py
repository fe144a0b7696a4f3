"""A model as pagedkv reads it from its ``config.json`` (SGLang: ``python/sglang/srt/configs/``).

- :mod:`~pagedkv.configs.model_config`: :class:`ModelSpec`, the KV geometry and weight size;
- :mod:`~pagedkv.configs.model_family`: which pools SGLang builds for it, and the refusals;
- :mod:`~pagedkv.configs.model_hybrid`: a hybrid's layer split, window and state bytes;
- :mod:`~pagedkv.configs.model_presets`: the shipped presets and :func:`load_model`.
"""
