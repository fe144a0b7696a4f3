"""Model forward passes on pagedkv's pool (SGLang's ``srt/models/``): Hugging Face modules,
pagedkv's attention."""
