"""``python -m pagedkv.kernels``: check the kernel against the reference, report GB/s."""

from pagedkv.kernels.decode_attention import demo

demo()
