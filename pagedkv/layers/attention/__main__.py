"""``python -m pagedkv.layers.attention``: check the kernel against the reference, report GB/s."""

from pagedkv.layers.attention.decode_attention import demo

demo()
